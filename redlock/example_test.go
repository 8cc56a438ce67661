package redlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redlocklab/redlocklab/redlock"
)

func ExampleClient_Acquire() {
	// sharedAddrs are five independent redis-server masters (host:port).
	nodes := redlock.NewNodes(sharedAddrs, redlock.WithNodeTimeout(250*time.Millisecond))
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	locker, err := redlock.New(nodes)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := locker.Acquire(ctx, "demo", 10*time.Second)
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	fmt.Println("acquired lock:" + lock.Key())
	// Work only while lock.Validity() > 0, and protect the resource itself
	// (fencing or a conditional write) if a double grant must never hurt it.
	if err := lock.Release(ctx); err != nil {
		fmt.Println("release:", err)
		return
	}
	fmt.Println("released")
	// Output:
	// acquired lock:demo
	// released
}

func ExampleClient_Do() {
	nodes := redlock.NewNodes(sharedAddrs, redlock.WithNodeTimeout(250*time.Millisecond))
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	locker, err := redlock.New(nodes)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = locker.Do(ctx, "demo-do", 2*time.Second, func(ctx context.Context) error {
		// ctx ends when the lock's validity runs out; stop there.
		fmt.Println("in critical section")
		return ctx.Err()
	}, redlock.WithAutoExtend(500*time.Millisecond, 10))
	fmt.Println("done, err:", err)
	// Output:
	// in critical section
	// done, err: <nil>
}

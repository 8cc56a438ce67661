package redlocktest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// addrs are three nodes TestMain started for the example.
var addrs []string

func TestMain(m *testing.M) {
	os.Exit(redlocktest.Main(m, 3, func(a []string) { addrs = a }))
}

// A test of code that takes locks, on real nodes: in a test function,
// redlocktest.Start(t, 3, redlocktest.Options{}) starts nodes of its own
// and redlocktest.NewClient(t, cl.Addrs(), …) a Client, both gone when the
// test ends. A Recorder keeps what the Client did.
func Example() {
	rec := &redlocktest.Recorder{}
	nodes := redlock.NewNodes(addrs)
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	locker, err := redlock.New(nodes, redlock.WithObserver(rec))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	ctx := context.Background()
	lock, err := locker.TryAcquire(ctx, "example", time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := lock.Release(ctx); err != nil {
		fmt.Println(err)
		return
	}
	events, _ := rec.Since(0)
	for _, e := range events {
		fmt.Printf("%s %s: quorum %d of %d, granted %v\n", e.Op, e.Key, e.Quorum, len(e.Nodes), e.Err == nil)
	}
	// Output:
	// acquire example: quorum 2 of 3, granted true
	// release example: quorum 2 of 3, granted true
}

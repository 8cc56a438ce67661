package redlock_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// maxOverlap returns the largest number of acquire attempts whose rounds,
// [Start, Start+Elapsed], overlap. An attempt's Elapsed is taken when its
// round is decided, before its slot is freed, so with one slot the rounds
// are disjoint.
func maxOverlap(events []redlock.Event) int {
	type point struct {
		at    time.Duration
		delta int
	}
	if len(events) == 0 {
		return 0
	}
	base := events[0].Start
	var pts []point
	for _, e := range events {
		at := e.Start.Sub(base)
		pts = append(pts, point{at, 1}, point{at + e.Elapsed, -1})
	}
	// On a tie the end comes first: a round that ends when the next starts
	// does not overlap it.
	slices.SortFunc(pts, func(a, b point) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta))
	})
	cur, peak := 0, 0
	for _, p := range pts {
		cur += p.delta
		peak = max(peak, cur)
	}
	return peak
}

// acquireMany acquires and releases distinct keys from many goroutines at
// once and returns the acquire events the Client reported.
func acquireMany(t *testing.T, addrs []string, opts ...redlock.Option) []redlock.Event {
	t.Helper()
	var (
		mu     sync.Mutex
		events []redlock.Event
	)
	obs := redlock.ObserverFunc(func(e redlock.Event) {
		if e.Op == redlock.OpAcquire {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}
	})
	c := redlocktest.NewClient(t, addrs, calmTimeout, append(opts, redlock.WithObserver(obs))...)
	ctx := testCtx(t)
	const goroutines, each = 16, 5
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range each {
				l, err := c.Acquire(ctx, fmt.Sprintf("adm-%d-%d", g, i), 10*time.Second)
				if err != nil {
					errs <- err
					continue
				}
				if err := l.Release(ctx); err != nil {
					errs <- err
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("acquire/release: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) < goroutines*each {
		t.Errorf("observed %d acquire attempts, want at least %d", len(events), goroutines*each)
	}
	return slices.Clone(events)
}

func TestMaxConcurrentAttemptsBoundsAttempts(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	events := acquireMany(t, cl.Addrs(), redlock.WithMaxConcurrentAttempts(1))
	if got := maxOverlap(events); got != 1 {
		t.Errorf("with WithMaxConcurrentAttempts(1): up to %d attempts in flight, want 1", got)
	}
	// Unbounded for contrast (informative only: overlap is likely, not certain).
	t.Logf("unbounded: up to %d attempts in flight", maxOverlap(acquireMany(t, cl.Addrs())))
}

// waitForWaiter bounds the wait for a caller to block on a slot; it asserts
// no timing.
func waitForWaiter(t *testing.T, c *redlock.Client, n int) {
	t.Helper()
	redlocktest.Eventually(t, 10*time.Second, fmt.Sprintf("%d slot waiter(s)", n), func() bool { return redlock.SlotWaiters(c) == n })
}

func TestMaxConcurrentAttemptsWaiterCancelled(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout, redlock.WithMaxConcurrentAttempts(1))
	ctx := testCtx(t)
	held, err := c.Acquire(ctx, "adm-held", 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	free := redlock.HoldSlot(c)

	for _, tc := range []struct {
		name string
		call func(context.Context) (*redlock.Lock, error)
	}{
		{"Acquire", func(ctx context.Context) (*redlock.Lock, error) { return c.Acquire(ctx, "adm-wait", time.Second) }},
		{"TryAcquire", func(ctx context.Context) (*redlock.Lock, error) { return c.TryAcquire(ctx, "adm-wait", time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := tc.call(wctx)
				done <- err
			}()
			waitForWaiter(t, c, 1)
			cancel()
			var err error
			select {
			case err = <-done:
			case <-ctx.Done():
				t.Fatal("waiter did not return after its context was cancelled")
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			if ae := attemptError(t, err); ae.Attempts != 0 {
				t.Errorf("got %d attempts, want 0", ae.Attempts)
			}
			waitForWaiter(t, c, 0)
		})
	}

	// Release and Extend are not bounded: they go through while the only
	// slot is taken.
	if err := held.Extend(ctx, 10*time.Second); err != nil {
		t.Errorf("Extend with every slot taken: %v", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Errorf("Release with every slot taken: %v", err)
	}

	// The cancelled waiters took no slot: once it is free, attempts run.
	free()
	l, err := c.Acquire(ctx, "adm-wait", time.Second)
	if err != nil {
		t.Fatalf("Acquire after the slot was freed: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

func TestMaxConcurrentAttemptsCloseWakesWaiters(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout, redlock.WithMaxConcurrentAttempts(1))
	ctx := testCtx(t)
	free := redlock.HoldSlot(c)
	defer free()

	const waiters = 3
	done := make(chan error, waiters)
	for i := range waiters {
		go func() {
			var err error
			if i%2 == 0 {
				_, err = c.Acquire(ctx, fmt.Sprintf("adm-close-%d", i), time.Second)
			} else {
				_, err = c.TryAcquire(ctx, fmt.Sprintf("adm-close-%d", i), time.Second)
			}
			done <- err
		}()
	}
	waitForWaiter(t, c, waiters)

	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	for range waiters {
		select {
		case err := <-done:
			if !errors.Is(err, redlock.ErrClosed) {
				t.Errorf("waiter: got %v, want ErrClosed", err)
			}
		case <-ctx.Done():
			t.Fatal("waiter still blocked after Close (deadlock)")
		}
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return (deadlock)")
	}
	if _, err := c.Acquire(ctx, "adm-after", time.Second); !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("Acquire after Close: got %v, want ErrClosed", err)
	}
}

// TestOverloadedAcquireBacksOff fills the adaptive limit and calls Acquire
// with a deadline too near for any round to finish after a wait: every
// attempt finds no place in time. Acquire must back off through its
// Backoff between such attempts rather than come straight back, and end,
// when its context does, with an error that says both why (ErrOverloaded)
// and when (the deadline), having sent nothing.
func TestOverloadedAcquireBacksOff(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	var (
		mu       sync.Mutex
		backoffs int
		marked   int
	)
	backoff := func(int) (time.Duration, bool) {
		mu.Lock()
		backoffs++
		mu.Unlock()
		return time.Millisecond, true
	}
	obs := redlock.ObserverFunc(func(e redlock.Event) {
		if e.Overloaded {
			mu.Lock()
			marked++
			mu.Unlock()
		}
	})
	const nodeTimeout = time.Second
	c := redlocktest.NewClient(t, cl.Addrs(), nodeTimeout, redlock.WithBackoff(backoff), redlock.WithObserver(obs))
	free := redlock.FillLimit(c)

	ctx, cancel := context.WithTimeout(testCtx(t), nodeTimeout/2)
	defer cancel()
	_, err := c.Acquire(ctx, "adm-backoff", 10*time.Second)
	if !errors.Is(err, redlock.ErrOverloaded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want an error wrapping ErrOverloaded and context.DeadlineExceeded", err)
	}
	if ae := attemptError(t, err); ae.Attempts != 0 || !ae.Last.Overloaded {
		t.Errorf("got %d attempts sent and last event overloaded=%v, want 0 and true", ae.Attempts, ae.Last.Overloaded)
	}
	mu.Lock()
	if backoffs == 0 || marked < backoffs {
		t.Errorf("got %d backoffs and %d overloaded attempts, want at least one backoff, each after an overloaded attempt", backoffs, marked)
	}
	mu.Unlock()

	// Once places are free, the same call goes through.
	free()
	l, err := c.Acquire(testCtx(t), "adm-backoff", 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire with the limit free: %v", err)
	}
	if err := l.Release(testCtx(t)); err != nil {
		t.Errorf("Release: %v", err)
	}
}

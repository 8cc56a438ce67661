package redlocklab_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// saturated starts n nodes behind fronts that make each a single server
// taking service for every request: the model of a node whose CPU is
// saturated. It returns the fronts' addresses and a function that lifts the
// saturation.
func saturated(tb testing.TB, n int, service time.Duration) ([]string, func()) {
	tb.Helper()
	cl := redlocktest.Start(tb, n, redlocktest.Options{})
	var addrs []string
	var proxies []*redistest.Proxy
	for _, node := range cl.Nodes {
		p := redistest.NewProxy(tb, node.Addr)
		p.Saturate(tb, service)
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr)
	}
	return addrs, func() {
		for _, p := range proxies {
			p.Heal()
		}
	}
}

// TestOverloadShedsAndRecovers offers a saturated node set three times what
// it can serve, open loop, and checks what the overload control promises
// without asserting any timing: the adaptive limit came down, the attempts
// it turned away were reported as overloaded, the retries of failed attempts
// stayed within the retry budget, and once the pressure is gone,
// acquisitions succeed again, concurrent ones included.
func TestOverloadShedsAndRecovers(t *testing.T) {
	// Each node serves one request per 4 ms: 250 requests/s, so about 125
	// acquire+release pairs per second. 375 calls/s is three times that.
	const (
		service     = 4 * time.Millisecond
		rate        = 375
		calls       = 600
		nodeTimeout = 100 * time.Millisecond
	)
	addrs, lift := saturated(t, 3, service)
	rec := &redlocktest.Recorder{}
	c := redlocktest.NewClient(t, addrs, nodeTimeout, redlock.WithObserver(rec))
	ctx := testCtx(t)

	var (
		wg                             sync.WaitGroup
		mu                             sync.Mutex
		granted, overloaded, otherErrs int
		firstOther                     error
	)
	tick := time.NewTicker(time.Second / rate)
	for i := range calls {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			l, err := c.Acquire(actx, fmt.Sprintf("overload-%d", i), 10*time.Second)
			if err == nil {
				err = l.Release(ctx)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				granted++
			case errors.Is(err, redlock.ErrOverloaded):
				overloaded++
				var ae *redlock.AttemptError
				if !errors.As(err, &ae) {
					t.Errorf("overloaded call: got %v (%T), want a *redlock.AttemptError", err, err)
				} else if !ae.Last.Overloaded && ae.Attempts == 0 {
					t.Errorf("overloaded call: got last event %+v, want it marked Overloaded", ae.Last)
				}
			default:
				otherErrs++
				if firstOther == nil {
					firstOther = err
				}
			}
		}()
	}
	tick.Stop()
	wg.Wait()
	t.Logf("under pressure: %d granted, %d overloaded, %d other failures (first: %v)", granted, overloaded, otherErrs, firstOther)

	events, next := rec.Since(0)
	var acquires []redlock.Event
	for _, e := range events {
		if e.Op == redlock.OpAcquire {
			acquires = append(acquires, e)
		}
	}
	// The limiter engaged: the limit came down from where it started.
	start, lowest := acquires[0].Limit, acquires[0].Limit
	marked, rejected := 0, 0
	for _, e := range acquires {
		if e.Rejected {
			rejected++
			continue // the breaker's: no limit
		}
		lowest = min(lowest, e.Limit)
		if e.Overloaded {
			marked++
			if len(e.Nodes) != 0 || !errors.Is(e.Err, redlock.ErrOverloaded) {
				t.Errorf("overloaded event: got %d nodes and err %v, want none and ErrOverloaded", len(e.Nodes), e.Err)
			}
		}
	}
	if lowest >= start {
		t.Errorf("limit: started at %d and never went lower, want the limiter to cut it under 3x overload", start)
	}
	if overloaded == 0 || marked == 0 {
		t.Errorf("got %d calls failing with ErrOverloaded and %d Overloaded events, want both > 0", overloaded, marked)
	}
	// The breaker and the limiter do not fight: timeouts of nodes that are
	// only slow shrink the limit, they do not open the breaker.
	if rejected > 0 {
		t.Errorf("got %d attempts refused by the circuit breaker, want none: slow nodes are the limiter's, not the breaker's", rejected)
	}
	// Retries after attempts that failed for want of nodes stay within the
	// budget: at most the burst plus the ratio of first attempts sent.
	// Calls use distinct keys, so an attempt's predecessor is the event
	// before it with the same key.
	firsts, budgeted := 0, 0
	prev := map[string]redlock.Event{}
	for _, e := range acquires {
		if len(e.Nodes) > 0 {
			if e.Attempt == 1 {
				firsts++
			} else if p, ok := prev[e.Key]; ok && !errors.Is(p.Err, redlock.ErrContended) {
				budgeted++
			}
		}
		prev[e.Key] = e
	}
	if limit := float64(redlock.DefaultRetryBurst) + redlock.DefaultRetryRatio*float64(firsts); float64(budgeted) > limit {
		t.Errorf("got %d retries of failed attempts after %d first attempts, want at most %.1f (the retry budget)", budgeted, firsts, limit)
	}
	t.Logf("limit from %d down to %d; %d first attempts, %d budgeted retries; %d refused by the breaker", start, lowest, firsts, budgeted, rejected)

	// The pressure is gone: bursts of concurrent acquisitions all succeed
	// again once the limit has grown back.
	lift()
	const burst = 8
	redlocktest.Eventually(t, 15*time.Second, fmt.Sprintf("a burst of %d concurrent acquisitions all granted", burst), func() bool {
		var bwg sync.WaitGroup
		errs := make(chan error, burst)
		for i := range burst {
			bwg.Add(1)
			go func() {
				defer bwg.Done()
				l, err := c.Acquire(ctx, fmt.Sprintf("after-%d-%d", next, i), 10*time.Second)
				if err == nil {
					err = l.Release(ctx)
				}
				errs <- err
			}()
		}
		bwg.Wait()
		close(errs)
		next++
		for err := range errs {
			if err != nil {
				return false
			}
		}
		return true
	})
}

// TestOverloadControlOff keeps every attempt: with the overload control off,
// nothing is turned away and no Event carries a limit.
func TestOverloadControlOff(t *testing.T) {
	addrs, _ := saturated(t, 3, 2*time.Millisecond)
	rec := &redlocktest.Recorder{}
	c := redlocktest.NewClient(t, addrs, testTimeout, redlock.WithObserver(rec), redlock.WithOverloadControl(false))
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if l, err := c.Acquire(actx, fmt.Sprintf("nocontrol-%d", i), 10*time.Second); err == nil {
				l.Release(ctx)
			} else if errors.Is(err, redlock.ErrOverloaded) {
				t.Errorf("call %d: got %v with the overload control off", i, err)
			}
		}()
	}
	wg.Wait()
	events, _ := rec.Since(0)
	for _, e := range events {
		if e.Overloaded || e.Limit != 0 {
			t.Errorf("event with the overload control off: got overloaded=%v limit=%d, want neither", e.Overloaded, e.Limit)
		}
	}
}

package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/redlock"
)

// TestClosedLoopNeverOverloaded runs a worker pool far wider than the
// adaptive limit's starting point: 256 goroutines, each acquiring and
// releasing keys of its own in a loop, a bounded number of times, on
// healthy nodes with NewNodes' default pools. A closed loop offers no more
// than it can carry: an attempt over the limit waits for a place instead of
// failing, so no call may end with ErrOverloaded. The calls have no
// deadline of their own (Acquire bounds them by the TTL); no timing is
// asserted.
//
// With the default node timeout, a busy machine (the race detector on two
// cores) makes some rounds slow: they cut the limit, and some requests time
// out. The limit then queues more attempts, which must still not be turned
// away; the timeouts are the machine's, so they are logged, not failed.
// With a node timeout no round reaches, every call must succeed.
func TestClosedLoopNeverOverloaded(t *testing.T) {
	cl := redistest.Start(t, 5, redistest.Options{})
	for _, tc := range []struct {
		name        string
		opts        []redlock.NodeOption
		anyErrFails bool
	}{
		{"default node timeout", nil, false},
		{"calm node timeout", []redlock.NodeOption{redlock.WithNodeTimeout(calmTimeout)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := redlock.NewNodes(cl.Addrs(), tc.opts...)
			c, err := redlock.New(nodes)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			t.Cleanup(func() {
				c.Close()
				for _, n := range nodes {
					n.Close()
				}
			})
			overloaded, other := closedLoop(c, t.Name(), 256, 8)
			if len(overloaded) > 0 {
				t.Errorf("got %d of %d cycles failing with ErrOverloaded (first: %v), want none in a closed loop on healthy nodes", len(overloaded), 256*8, overloaded[0])
			}
			switch {
			case len(other) > 0 && tc.anyErrFails:
				t.Errorf("got %d of %d cycles failing (first: %v), want none", len(other), 256*8, other[0])
			case len(other) > 0:
				t.Logf("%d of %d cycles failed otherwise (first: %v)", len(other), 256*8, other[0])
			}
		})
	}
}

// closedLoop runs workers goroutines that each acquire and release cycles
// keys of their own, one after the other, and returns the errors of the
// cycles that failed, those wrapping ErrOverloaded apart.
func closedLoop(c *redlock.Client, prefix string, workers, cycles int) (overloaded, other []error) {
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range cycles {
				l, err := c.Acquire(context.Background(), fmt.Sprintf("%s-%d-%d", prefix, w, i), 10*time.Second)
				if err == nil {
					err = l.Release(context.Background())
				}
				if err == nil {
					continue
				}
				mu.Lock()
				if errors.Is(err, redlock.ErrOverloaded) {
					overloaded = append(overloaded, err)
				} else {
					other = append(other, err)
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	return overloaded, other
}

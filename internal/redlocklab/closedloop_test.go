package redlocklab_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// TestClosedLoopNeverOverloaded runs a worker pool far wider than the
// adaptive limit's starting point: 256 goroutines, acquiring and releasing
// keys of their own in a loop, 2048 cycles in all (see closedLoop), on
// healthy nodes with NewNodes' default pools. A closed loop offers no more
// than it can carry: an attempt over the limit waits for a place instead of
// failing, so no call may end with ErrOverloaded. The calls have no
// deadline of their own (Acquire bounds them by the TTL, long here so that
// only a wait that never ends could fail them); no timing is asserted.
//
// With the default node timeout, a busy machine (the race detector on two
// cores) makes some rounds slow: they cut the limit, and some requests time
// out. The limit then queues more attempts, which must still not be turned
// away; the timeouts are the machine's, so they are logged, not failed.
// With a node timeout no round reaches, every call must succeed.
func TestClosedLoopNeverOverloaded(t *testing.T) {
	cl := redlocktest.Start(t, 5, redlocktest.Options{})
	for _, tc := range []struct {
		name        string
		nodeTimeout time.Duration // 0: NewNodes' default
		anyErrFails bool
	}{
		{"default node timeout", 0, false},
		{"calm node timeout", calmTimeout, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redlocktest.NewClient(t, cl.Addrs(), tc.nodeTimeout)
			const workers, cycles = 256, 256 * 8
			ctx := context.Background()
			_, errs := closedLoop(workers, cycles, func(w, i int) error {
				l, err := c.Acquire(ctx, fmt.Sprintf("%s-%d", t.Name(), i), time.Minute)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			})
			var overloaded, other []error
			for _, err := range errs {
				if errors.Is(err, redlock.ErrOverloaded) {
					overloaded = append(overloaded, err)
				} else {
					other = append(other, err)
				}
			}
			if len(overloaded) > 0 {
				t.Errorf("got %d of %d cycles failing with ErrOverloaded (first: %v), want none in a closed loop on healthy nodes", len(overloaded), cycles, overloaded[0])
			}
			switch {
			case len(other) > 0 && tc.anyErrFails:
				t.Errorf("got %d of %d cycles failing (first: %v), want none", len(other), cycles, other[0])
			case len(other) > 0:
				t.Logf("%d of %d cycles failed otherwise (first: %v)", len(other), cycles, other[0])
			}
		})
	}
}

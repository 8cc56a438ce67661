package inventory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// versionTries bounds the tries of one optimistic reservation. A try loses
// only to a writer that committed between its read and its write, so at the
// lab's hot-key rates (a few hundred a second at most) a handful of tries
// covers the writers a try can meet; past that the key is hotter than
// optimism serves, and retrying without end would be a lock by another
// name (waiting with no bound). Eight tries with versionBackoff cost a few
// tens of milliseconds at worst before ErrConflict says so.
const versionTries = 8

// versionBackoff is the wait before retry n (n >= 1): full jitter, uniform
// in [0, min(1ms·2^(n−1), 16ms)], so that the writers that lost the same
// round do not read again in step.
func versionBackoff(n int) time.Duration {
	ceiling := min(time.Millisecond<<min(n-1, 4), 16*time.Millisecond)
	return rand.N(ceiling + 1)
}

// dbVersionGuard is GuardDBVersion, optimistic locking (JPA's @Version):
// read the stock and the row's version, compute, then write
// UPDATE … SET stock = ?, version = version + 1 WHERE sku = ? AND
// version = ?, in the transaction of the ledger row. A write that finds
// another version wrote nothing: read again and retry, up to versionTries
// tries, then ErrConflict. No lock is held at any point, so a paused
// holder blocks nobody; it only loses its own try.
type dbVersionGuard struct{ s *Service }

func newDBVersionGuard(s *Service) (guard, error) { return dbVersionGuard{s}, nil }

func (g dbVersionGuard) reserve(ctx context.Context, req Request) (Reservation, Timing, error) {
	var t Timing
	start := time.Now()
	for {
		t.Attempts++
		try := time.Now()
		t.Acquire = try.Sub(start)
		r, err := g.s.readModifyWrite(ctx, req, writeVersioned, 0)
		t.Hold = time.Since(try)
		if !errors.Is(err, errVersionConflict) {
			return r, t, err
		}
		t.Conflicts++
		if t.Attempts == versionTries {
			return Reservation{}, t, fmt.Errorf("%w: sku %q changed under each of %d tries", ErrConflict, req.SKU, t.Attempts)
		}
		wait := time.NewTimer(versionBackoff(t.Attempts))
		select {
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
			return Reservation{}, t, fmt.Errorf("inventory: retry after a version conflict: %w", ctx.Err())
		}
	}
}

func (dbVersionGuard) ready(context.Context) (int, int, error) { return 0, 0, nil }

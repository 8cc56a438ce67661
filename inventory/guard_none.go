package inventory

import (
	"context"
	"time"
)

// noneGuard is GuardNone: read, compute, write back, with no lock at all.
type noneGuard struct{ s *Service }

func newNoneGuard(s *Service) (guard, error) { return noneGuard{s}, nil }

func (g noneGuard) reserve(ctx context.Context, req Request) (Reservation, Timing, error) {
	return unlocked(ctx, func(ctx context.Context) (Reservation, error) {
		return g.s.readModifyWrite(ctx, req, writeBlind, 0)
	})
}

func (noneGuard) ready(context.Context) (int, int, error) { return 0, 0, nil }

// unlocked runs a critical section with no lock, timing it as the hold.
func unlocked(ctx context.Context, body func(context.Context) (Reservation, error)) (Reservation, Timing, error) {
	start := time.Now()
	r, err := body(ctx)
	return r, Timing{Hold: time.Since(start)}, err
}

package inventory

import (
	"context"
	"fmt"
)

// redlockFencedGuard is GuardRedlockFenced: Redlock plus a fencing token
// from the store's own counter (fence_seq). The row is fenced before the
// read, and the write applies only while the row still carries the token.
// As guardRedlockFencedNaive it checks the token only at write time, the
// variant that still loses updates.
type redlockFencedGuard struct{ s *Service }

func newRedlockFencedGuard(s *Service) (guard, error) {
	if s.locker == nil {
		return nil, fmt.Errorf("inventory: guard %s needs a Redlock client", s.guard)
	}
	return redlockFencedGuard{s}, nil
}

func (g redlockFencedGuard) reserve(ctx context.Context, req Request) (Reservation, Timing, error) {
	s := g.s
	return s.withRedlock(ctx, req, func(ctx context.Context) (Reservation, error) {
		token, err := s.nextFence(ctx)
		if err != nil {
			return Reservation{}, err
		}
		if s.guard == guardRedlockFencedNaive {
			return s.readModifyWrite(ctx, req, writeNaive, token)
		}
		// Fence before the read: from here on, any older holder's write is
		// rejected, so the value read below stays ours.
		if err := s.fence(ctx, req.SKU, token); err != nil {
			return Reservation{}, err
		}
		return s.readModifyWrite(ctx, req, writeFenced, token)
	})
}

func (g redlockFencedGuard) ready(ctx context.Context) (int, int, error) {
	return redlockReady(ctx, g.s.locker)
}

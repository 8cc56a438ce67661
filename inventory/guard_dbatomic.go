package inventory

import "context"

// dbAtomicGuard is GuardDBAtomic: the database decides in one statement,
// UPDATE … SET stock = stock − q WHERE stock >= q, with no lock and no read.
type dbAtomicGuard struct{ s *Service }

func newDBAtomicGuard(s *Service) (guard, error) { return dbAtomicGuard{s}, nil }

func (g dbAtomicGuard) reserve(ctx context.Context, req Request) (Reservation, Timing, error) {
	return unlocked(ctx, func(ctx context.Context) (Reservation, error) {
		g.s.pause(ctx, req)
		return g.s.apply(ctx, write{mode: writeAtomic, req: req, guard: g.s.guard, holder: g.s.cfg.holder})
	})
}

func (dbAtomicGuard) ready(context.Context) (int, int, error) { return 0, 0, nil }

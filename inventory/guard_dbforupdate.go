package inventory

import (
	"context"
	"time"
)

// dbForUpdateGuard is GuardDBForUpdate: the database is the lock. The
// reservation's transaction locks the row as it reads it (Store.lockRow:
// SELECT … FOR UPDATE on PostgreSQL; on SQLite the transaction's BEGIN
// IMMEDIATE, which locks the whole database, not the row), runs the pause
// hook, writes the computed stock and the ledger row, and commits.
//
// The lock is held across the pause: a paused holder makes every other
// writer of the row (on SQLite, of the database) wait, which is the price
// of a lock that cannot expire under its holder. On PostgreSQL a waiter
// gives up after the service's acquire timeout (lock_timeout) with
// ErrContended; on SQLite after the busy timeout (5 s) with ErrUnavailable.
// A holder whose process dies loses its connection, and the database rolls
// the transaction back and frees the row.
//
// Timing.Acquire is the time to get the row lock (a pool connection
// included), Hold the lock to the commit, Attempts 1.
type dbForUpdateGuard struct{ s *Service }

func newDBForUpdateGuard(s *Service) (guard, error) { return dbForUpdateGuard{s}, nil }

func (g dbForUpdateGuard) reserve(ctx context.Context, req Request) (Reservation, Timing, error) {
	s := g.s
	t := Timing{Attempts: 1}
	start := time.Now()
	l, err := s.lockRow(ctx, req.SKU)
	locked := time.Now()
	t.Acquire = locked.Sub(start)
	if err != nil {
		return Reservation{}, t, err
	}
	defer l.rollback()
	var r Reservation
	if l.stock < req.Quantity {
		err = outOfStock(req, l.stock)
	} else {
		s.pause(ctx, req)
		r, err = s.applyLocked(ctx, l, write{
			mode: writeBlind, req: req, newStock: l.stock - req.Quantity,
			guard: s.guard, holder: s.cfg.holder,
		})
	}
	t.Hold = time.Since(locked)
	return r, t, err
}

func (dbForUpdateGuard) ready(context.Context) (int, int, error) { return 0, 0, nil }

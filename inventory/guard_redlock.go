package inventory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redlocklab/redlocklab/redlock"
)

// redlockGuard is GuardRedlock, and GuardRedlockDel when it releases with
// a plain DEL: acquire lock:sku:<sku> with this repository's Redlock
// client, read, write, release in a deferred call.
type redlockGuard struct{ s *Service }

func newRedlockGuard(s *Service) (guard, error) {
	if s.locker == nil {
		return nil, fmt.Errorf("inventory: guard %s needs a Redlock client", s.guard)
	}
	if s.guard == GuardRedlockDel && len(s.cfg.delNodes) == 0 {
		return nil, fmt.Errorf("inventory: guard %s needs WithDeleteNodes", s.guard)
	}
	return redlockGuard{s}, nil
}

func (g redlockGuard) reserve(ctx context.Context, req Request) (Reservation, Timing, error) {
	return g.s.withRedlock(ctx, req, func(ctx context.Context) (Reservation, error) {
		return g.s.readModifyWrite(ctx, req, writeBlind, 0)
	})
}

func (g redlockGuard) ready(ctx context.Context) (int, int, error) {
	return redlockReady(ctx, g.s.locker)
}

// redlockReady is the Redlock guards' readiness: a quorum of nodes answers.
func redlockReady(ctx context.Context, l *redlock.Client) (int, int, error) {
	up, err := l.Ping(ctx)
	if err != nil {
		err = fmt.Errorf("inventory: redlock nodes: %w", err)
	}
	return up, l.Quorum(), err
}

// withRedlock is the classic Redlock critical section: acquire, run body,
// release in a deferred call. It does not check the lock's validity before
// writing (that would only narrow the window, not close it): the pause test
// shows what that costs, and the fenced guard what fixes it.
func (s *Service) withRedlock(ctx context.Context, req Request, body func(context.Context) (Reservation, error)) (r Reservation, t Timing, err error) {
	key := lockKey(req.SKU)
	actx, cancel := context.WithTimeout(ctx, s.cfg.acquireTimeout)
	start := time.Now()
	lock, err := s.locker.Acquire(actx, key, s.cfg.ttl)
	cancel()
	if err != nil {
		t.Acquire = time.Since(start)
		var ae *redlock.AttemptError
		if errors.As(err, &ae) {
			t.Attempts = ae.Attempts
		}
		return Reservation{}, t, redlockError(ctx, err)
	}
	t.Acquire, t.Attempts = lock.AcquireTime(), lock.Attempts()
	granted := time.Now()
	defer func() {
		released := time.Now()
		t.Hold = released.Sub(granted)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		// A release that finds the lock expired or taken over is not this
		// reservation's failure: its write has already happened or not.
		if s.guard == GuardRedlockDel {
			s.deleteRelease(rctx, key)
		} else {
			_ = lock.Release(rctx)
		}
		cancel()
		t.Release = time.Since(released)
		s.observe(Hold{Key: key, Holder: s.cfg.holder, Token: lock.Token(), Granted: granted, Released: released, ValidUntil: lock.Deadline()})
	}()
	r, err = body(ctx)
	return r, t, err
}

// deleteRelease is GuardRedlockDel's release: DEL key on every node, in
// parallel, whoever's token the key holds now. When this holder's lock has
// expired and another holder took the key, this deletes the other holder's
// lock: the mistake the guard exists to show.
func (s *Service) deleteRelease(ctx context.Context, key string) {
	var wg sync.WaitGroup
	for _, n := range s.cfg.delNodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = n.Del(ctx, key).Err()
		}()
	}
	wg.Wait()
}

// redlockError translates a failed Acquire into the package's errors.
func redlockError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("inventory: acquire lock: %w", ctx.Err())
	case errors.Is(err, redlock.ErrOverloaded):
		return fmt.Errorf("%w: %w", ErrOverloaded, err)
	case errors.Is(err, redlock.ErrUnavailable), errors.Is(err, redlock.ErrValidityExhausted):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.Is(err, redlock.ErrContended), errors.Is(err, context.DeadlineExceeded):
		// Our acquire timeout ran out while someone else held the lock.
		return fmt.Errorf("%w: %w", ErrContended, err)
	default:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}

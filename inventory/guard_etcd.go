package inventory

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// etcdGuard is GuardEtcd: etcd's concurrency.Mutex on the SKU's prefix,
// read, write, release in a deferred call. Like the Redlock guard it does
// not look at the lock's validity before writing.
type etcdGuard struct {
	s *Service
	l *etcdLocker
}

func newEtcdGuard(s *Service) (guard, error) {
	l, err := s.newEtcdLocker()
	if err != nil {
		return nil, err
	}
	return &etcdGuard{s: s, l: l}, nil
}

// newEtcdLocker is the etcd guards' locker, or why the Service cannot
// have one. NewService has checked the TTL (Guard.CheckTTL).
func (s *Service) newEtcdLocker() (*etcdLocker, error) {
	if s.cfg.etcd == nil {
		return nil, fmt.Errorf("inventory: guard %s needs an etcd client (WithEtcd)", s.guard)
	}
	return newEtcdLocker(s.cfg.etcd, s.cfg.ttl), nil
}

func (g *etcdGuard) reserve(ctx context.Context, req Request) (Reservation, Timing, error) {
	return g.s.withEtcdLock(ctx, req, g.l, func(ctx context.Context, _ int64) (Reservation, error) {
		return g.s.readModifyWrite(ctx, req, writeBlind, 0)
	})
}

func (g *etcdGuard) ready(ctx context.Context) (int, int, error) { return g.l.ready(ctx) }

func (g *etcdGuard) close() error { return g.l.close() }

// withEtcdLock runs body under the SKU's etcd lock, giving it the lock
// key's create revision: acquire within the acquire timeout, run body,
// release in a deferred call bounded on its own, even when ctx is done.
func (s *Service) withEtcdLock(ctx context.Context, req Request, l *etcdLocker, body func(ctx context.Context, rev int64) (Reservation, error)) (r Reservation, t Timing, err error) {
	prefix := etcdLockPrefix(req.SKU)
	actx, cancel := context.WithTimeout(ctx, s.cfg.acquireTimeout)
	start := time.Now()
	lk, attempts, err := l.lock(actx, prefix)
	t.Acquire, t.Attempts = time.Since(start), attempts
	if err != nil {
		err = etcdError(ctx, actx, err)
		cancel()
		return Reservation{}, t, err
	}
	cancel()
	granted := time.Now()
	defer func() {
		released := time.Now()
		validUntil := lk.s.validity()
		t.Hold = released.Sub(granted)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		// As with Redlock, a release that finds the key gone (the lease
		// expired) is not this reservation's failure.
		l.unlock(rctx, lk)
		cancel()
		t.Release = time.Since(released)
		s.observe(Hold{Key: prefix, Holder: s.cfg.holder, Token: strconv.FormatInt(lk.rev, 10),
			Granted: granted, Released: released, ValidUntil: validUntil})
	}()
	r, err = body(ctx, lk.rev)
	return r, t, err
}

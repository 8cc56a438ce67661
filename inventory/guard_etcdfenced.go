package inventory

import "context"

// etcdFencedGuard is GuardEtcdFenced: the etcd lock plus its key's create
// revision as the fencing token, etcd's documented one. The row is fenced
// before the read and the write applies only while the row still carries
// the token, as with redlock-fenced, but in the row's etcd_fence column: a
// new etcd cluster counts revisions from 1 again, and they must never be
// compared with the store's own fence_seq tokens.
type etcdFencedGuard struct {
	s *Service
	l *etcdLocker
}

func newEtcdFencedGuard(s *Service) (guard, error) {
	l, err := s.newEtcdLocker()
	if err != nil {
		return nil, err
	}
	return &etcdFencedGuard{s: s, l: l}, nil
}

func (g *etcdFencedGuard) reserve(ctx context.Context, req Request) (Reservation, Timing, error) {
	s := g.s
	return s.withEtcdLock(ctx, req, g.l, func(ctx context.Context, rev int64) (Reservation, error) {
		if err := s.fence(ctx, req.SKU, rev); err != nil {
			return Reservation{}, err
		}
		return s.readModifyWrite(ctx, req, writeFenced, rev)
	})
}

func (g *etcdFencedGuard) ready(ctx context.Context) (int, int, error) { return g.l.ready(ctx) }

func (g *etcdFencedGuard) close() error { return g.l.close() }

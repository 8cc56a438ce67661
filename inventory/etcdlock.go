package inventory

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// MinEtcdLockTTL is the shortest lock TTL the etcd guards accept. An etcd
// server grants no lease shorter than 1.5 election timeouts, rounded up to
// whole seconds: 2 s with the default 1 s election timeout. Asked for less,
// it silently grants 2 s, and the lock would be held longer than the
// service was told; so a shorter TTL is refused (Guard.CheckTTL) and a
// longer one rounded up to whole seconds.
const MinEtcdLockTTL = 2 * time.Second

// maxIdleEtcdSessions bounds the sessions a locker keeps between
// reservations: each costs a goroutine and a keep-alive every third of the
// TTL. Beyond it a returned session's lease is revoked.
const maxIdleEtcdSessions = 256

// etcdStatusTimeout bounds each member's status request of ready: the
// client waits for a connection to a dead member until its context ends.
const etcdStatusTimeout = time.Second

// errEtcdClosed: the locker was closed (the Service is shutting down).
var errEtcdClosed = errors.New("inventory: etcd locker closed")

// etcdLockPrefix is where a SKU's lock lives: concurrency.Mutex queues its
// waiters under it, one key per lease, and the oldest key holds the lock.
func etcdLockPrefix(sku string) string { return "/redlab/lock/sku/" + sku }

// etcdLocker takes the etcd guards' locks for one Service: a
// concurrency.Mutex per reservation, on a session taken from a pool.
//
// A Mutex's key is its session's lease, so two reservations sharing one
// session would both "hold" the lock; each session is therefore taken by
// one reservation at a time and returned after. A session whose lease was
// lost, or whose keep-alives stopped being answered, is discarded.
//
// The locker keeps the leases alive itself rather than through
// concurrency.Session, which hides its keep-alives: the validity a Hold
// reports is what the client can know, the send time of the last
// keep-alive (or grant) the server answered plus the TTL it granted. The
// server counts the TTL from when it received that request, so the lease
// cannot have expired before this validity.
type etcdLocker struct {
	client *clientv3.Client
	ttl    int64 // lease TTL, whole seconds
	// ctx is the keep-alives' context: a child of the client's, cancelled
	// by close.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	idle   []*etcdSession
	all    map[*etcdSession]struct{}
	frozen chan struct{} // non-nil while freeze holds the keep-alives back
	closed bool
	// wg counts the keep-alive loops and the background revokes.
	wg sync.WaitGroup
}

// etcdSession is one lease and the concurrency.Session over it, with the
// validity its keep-alives earned.
type etcdSession struct {
	lease    clientv3.LeaseID
	cs       *concurrency.Session
	interval time.Duration // between keep-alives
	stop     chan struct{}
	stopOnce sync.Once

	mu         sync.Mutex
	validUntil time.Time // monotonic
	lost       bool      // the server no longer knows the lease
}

// etcdLock is one held lock.
type etcdLock struct {
	s *etcdSession
	m *concurrency.Mutex
	// rev is the lock key's create revision: it grows with each new holder
	// of the prefix, the fencing token of etcd-fenced.
	rev int64
}

func newEtcdLocker(client *clientv3.Client, ttl time.Duration) *etcdLocker {
	ctx, cancel := context.WithCancel(client.Ctx())
	return &etcdLocker{
		client: client,
		ttl:    int64(math.Ceil(ttl.Seconds())),
		ctx:    ctx, cancel: cancel,
		all: map[*etcdSession]struct{}{},
	}
}

// lock takes the lock of prefix, waiting in etcd's queue until ctx ends. It
// returns the attempts made: a second one follows when the pool's session
// turned out to have lost its lease. A failure is an *etcdAcquireError.
func (l *etcdLocker) lock(ctx context.Context, prefix string) (*etcdLock, int, error) {
	for attempt := 1; ; attempt++ {
		s, err := l.take(ctx)
		if err != nil {
			return nil, attempt, &etcdAcquireError{err: err}
		}
		m := concurrency.NewMutex(s.cs, prefix)
		err = mutexLock(ctx, m)
		if errors.Is(err, errLockAbandoned) {
			// The abandoned Lock may still put or hold the key: only the
			// session's lease, revoked here, takes it away.
			l.discard(s)
			return nil, attempt, &etcdAcquireError{err: err}
		}
		if err == nil {
			return &etcdLock{s: s, m: m, rev: ownerRevision(m)}, attempt, nil
		}
		held, werr := l.withdraw(ctx, s, prefix)
		leaseGone := errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, concurrency.ErrSessionExpired)
		if leaseGone {
			s.markLost()
		}
		if werr != nil || leaseGone {
			l.discard(s)
		} else {
			l.put(s)
		}
		if leaseGone && attempt == 1 && ctx.Err() == nil {
			continue
		}
		return nil, attempt, &etcdAcquireError{held: werr == nil && held, err: err}
	}
}

// errLockAbandoned is a Lock left to finish on its own (mutexLock).
var errLockAbandoned = errors.New("inventory: etcd lock abandoned: its clean-up did not return")

// mutexLock is m.Lock(ctx), bounded by ctx. After a failed wait Mutex.Lock
// deletes its key on the client's own context, not ctx, so a request lost
// on the wire (measured behind a healed partition of the etcd leader, on a
// connection whose keep-alive pings were answered) holds the caller
// forever. releaseTimeout past ctx's end, the Lock is left running; it
// ends when the connection or the client does.
func mutexLock(ctx context.Context, m *concurrency.Mutex) error {
	done := make(chan error, 1)
	go func() { done <- m.Lock(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(releaseTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("%w (%w)", errLockAbandoned, ctx.Err())
	}
}

// withdraw takes this session's key out of prefix's queue after a failed
// Lock (whose put may have landed although its answer did not), and says
// whether someone else holds the lock now. Its context is bounded on its
// own: it runs after the acquire timeout ran out.
func (l *etcdLocker) withdraw(ctx context.Context, s *etcdSession, prefix string) (held bool, err error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	resp, err := l.client.Txn(wctx).Then(
		clientv3.OpDelete(fmt.Sprintf("%s/%x", prefix, s.lease)),
		clientv3.OpGet(prefix+"/", clientv3.WithFirstCreate()...),
	).Commit()
	if err != nil {
		return false, err
	}
	// An unconditional transaction answers both operations; seen empty in
	// a drill that partitioned the leader, so it is checked, not indexed.
	if len(resp.Responses) != 2 || resp.Responses[1].GetResponseRange() == nil {
		return false, fmt.Errorf("inventory: withdraw from %s: etcd answered %d of 2 operations", prefix, len(resp.Responses))
	}
	return len(resp.Responses[1].GetResponseRange().Kvs) > 0, nil
}

// unlock releases the lock and returns its session to the pool; a session
// whose unlock failed may still hold the key, so its lease is revoked.
func (l *etcdLocker) unlock(ctx context.Context, lk *etcdLock) {
	if err := lk.m.Unlock(ctx); err != nil {
		l.discard(lk.s)
		return
	}
	l.put(lk.s)
}

// ownerRevision is the create revision of m's key, which m holds. The
// Mutex keeps it for IsOwner, the comparison a transaction uses to act
// only while the lock is held; reading it there saves a round trip.
func ownerRevision(m *concurrency.Mutex) int64 {
	cmp := m.IsOwner()
	if cr, ok := cmp.TargetUnion.(*pb.Compare_CreateRevision); ok {
		return cr.CreateRevision
	}
	return 0
}

// take returns an idle session that is still alive, or a new one.
func (l *etcdLocker) take(ctx context.Context) (*etcdSession, error) {
	l.mu.Lock()
	for len(l.idle) > 0 {
		s := l.idle[len(l.idle)-1]
		l.idle = l.idle[:len(l.idle)-1]
		if s.alive() {
			l.mu.Unlock()
			return s, nil
		}
		l.mu.Unlock()
		l.discard(s)
		l.mu.Lock()
	}
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, errEtcdClosed
	}
	return l.newSession(ctx)
}

// put returns a session to the pool, or discards it.
func (l *etcdLocker) put(s *etcdSession) {
	l.mu.Lock()
	if !l.closed && s.alive() && len(l.idle) < maxIdleEtcdSessions {
		l.idle = append(l.idle, s)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.discard(s)
}

// newSession grants a lease and starts its keep-alive loop.
func (l *etcdLocker) newSession(ctx context.Context) (*etcdSession, error) {
	sent := time.Now()
	resp, err := l.client.Grant(ctx, l.ttl)
	if err != nil {
		return nil, fmt.Errorf("inventory: etcd lease: %w", err)
	}
	cs, err := concurrency.NewSession(l.client, concurrency.WithLease(resp.ID), concurrency.WithContext(l.ctx))
	if err != nil {
		l.revokeLater(resp.ID)
		return nil, fmt.Errorf("inventory: etcd session: %w", err)
	}
	// NewSession keeps the lease alive itself, out of sight; stop that and
	// keep it alive here, where each answer's time is known.
	cs.Orphan()
	interval := time.Duration(l.ttl) * time.Second / 3
	s := &etcdSession{
		lease: resp.ID, cs: cs, interval: interval, stop: make(chan struct{}),
		validUntil: sent.Add(time.Duration(resp.TTL) * time.Second),
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.revokeLater(resp.ID)
		return nil, errEtcdClosed
	}
	l.all[s] = struct{}{}
	l.wg.Add(1)
	l.mu.Unlock()
	go l.keepAlive(s)
	return s, nil
}

// keepAlive renews s's lease every third of the TTL, as etcd's own client
// does, until s is discarded, its lease is gone or the locker closes.
func (l *etcdLocker) keepAlive(s *etcdSession) {
	defer l.wg.Done()
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		frozen := l.frozen
		l.mu.Unlock()
		if frozen != nil {
			select {
			case <-frozen:
			case <-s.stop:
				return
			case <-l.ctx.Done():
				return
			}
		}
		sent := time.Now()
		kctx, cancel := context.WithTimeout(l.ctx, s.interval)
		resp, err := l.client.KeepAliveOnce(kctx, s.lease)
		cancel()
		switch {
		case err == nil:
			s.renewed(sent.Add(time.Duration(resp.TTL) * time.Second))
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.markLost()
			return
		}
		// Any other failure leaves the validity where the last answer put
		// it; the next tick tries again.
	}
}

// freeze holds every keep-alive of the locker back until the returned
// thaw is called: what a stop-the-world pause of the process (SIGSTOP, a
// long GC) does to them, while the lease runs out on the server. The
// package's tests pause a holder this way.
func (l *etcdLocker) freeze() (thaw func()) {
	ch := make(chan struct{})
	l.mu.Lock()
	l.frozen = ch
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.frozen == ch {
			l.frozen = nil
			close(ch)
		}
	}
}

// discard stops s's keep-alives and revokes its lease in the background
// (a lease that cannot be revoked expires within its TTL anyway).
func (l *etcdLocker) discard(s *etcdSession) {
	s.stopOnce.Do(func() { close(s.stop) })
	l.mu.Lock()
	delete(l.all, s)
	l.mu.Unlock()
	s.mu.Lock()
	lost := s.lost
	s.mu.Unlock()
	if !lost {
		l.revokeLater(s.lease)
	}
}

// revokeLater revokes a lease without making the caller wait; close waits
// for it. Once the locker is closed it revokes at once.
func (l *etcdLocker) revokeLater(id clientv3.LeaseID) {
	l.mu.Lock()
	closed := l.closed
	if !closed {
		l.wg.Add(1)
	}
	l.mu.Unlock()
	if closed {
		l.revoke(id)
		return
	}
	go func() {
		defer l.wg.Done()
		l.revoke(id)
	}()
}

func (l *etcdLocker) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(l.client.Ctx(), releaseTimeout)
	defer cancel()
	_, _ = l.client.Revoke(ctx, id)
}

// close revokes every session's lease, in parallel, and stops the
// keep-alive loops. A reservation still holding a session gets its lock
// released as usual; its session is then discarded. It is idempotent.
func (l *etcdLocker) close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.idle = nil
	var revoke []clientv3.LeaseID
	for s := range l.all {
		s.stopOnce.Do(func() { close(s.stop) })
		s.mu.Lock()
		if !s.lost {
			revoke = append(revoke, s.lease)
		}
		s.mu.Unlock()
	}
	l.all = map[*etcdSession]struct{}{}
	if l.frozen != nil {
		close(l.frozen)
		l.frozen = nil
	}
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range revoke {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.revoke(id)
		}()
	}
	wg.Wait()
	l.cancel()
	l.wg.Wait()
	return nil
}

// ready reports how many of the client's endpoints answer a status
// request, and the quorum of the cluster's members (as an answering member
// lists them; of the endpoints when none does). The lock can be taken when
// a quorum answers and one of them knows a leader.
func (l *etcdLocker) ready(ctx context.Context) (up, quorum int, err error) {
	eps := l.client.Endpoints()
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		leader  bool
		lastErr error
		members = len(eps)
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Serializable: a member without a quorum still lists the members.
		mctx, cancel := context.WithTimeout(ctx, etcdStatusTimeout)
		defer cancel()
		if ml, err := l.client.MemberList(mctx, clientv3.WithSerializable()); err == nil {
			mu.Lock()
			members = len(ml.Members)
			mu.Unlock()
		}
	}()
	for _, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, etcdStatusTimeout)
			st, err := l.client.Status(sctx, ep)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				lastErr = fmt.Errorf("%s: %w", ep, err)
				return
			}
			up++
			leader = leader || st.Leader != 0
		}()
	}
	wg.Wait()
	quorum = members/2 + 1
	switch {
	case up < quorum:
		return up, quorum, fmt.Errorf("inventory: etcd: %d of %d members answer, %d needed: %w", up, members, quorum, lastErr)
	case !leader:
		return up, quorum, fmt.Errorf("inventory: etcd: %w", rpctypes.ErrNoLeader)
	}
	return up, quorum, nil
}

func (s *etcdSession) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Less than a keep-alive interval left: the last answers were missed.
	return !s.lost && time.Until(s.validUntil) > s.interval
}

func (s *etcdSession) renewed(until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if until.After(s.validUntil) {
		s.validUntil = until
	}
}

func (s *etcdSession) markLost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost = true
}

// validity is when the lease may have expired, as the client knows it now.
func (s *etcdSession) validity() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.validUntil
}

// etcdAcquireError is a failed etcd acquire: the cause, and whether
// another holder had the lock when it failed.
type etcdAcquireError struct {
	held bool
	err  error
}

func (e *etcdAcquireError) Error() string { return e.err.Error() }
func (e *etcdAcquireError) Unwrap() error { return e.err }

// etcdError translates a failed acquire into the package's errors: the
// caller's context error; ErrContended when the acquire timeout (actx) ran
// out while another holder had the lock; ErrUnavailable otherwise (etcd
// unreachable, no leader, the lease lost while waiting).
func etcdError(ctx, actx context.Context, err error) error {
	var ae *etcdAcquireError
	held := errors.As(err, &ae) && ae.held
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("inventory: acquire lock: %w", ctx.Err())
	case held && errors.Is(actx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w: another holder kept the etcd lock for the acquire timeout: %w", ErrContended, err)
	default:
		return fmt.Errorf("%w: etcd: %w", ErrUnavailable, err)
	}
}

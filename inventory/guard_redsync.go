package inventory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redsyncLocker is the redsync guard's lock: go-redsync/redsync v4 over one
// goredis/v9 pool per node, with redsync's own defaults. The only thing it
// adds is an observer on each pool that counts the SET NX replies of an
// acquire, so that a failed acquire can say whether the key was held by
// someone else (contended) or the nodes did not answer in time
// (unavailable); redsync's own error after a cancelled context is always
// ErrFailed. The observer changes nothing redsync sends or waits for.
type redsyncLocker struct {
	rs    *redsync.Redsync
	nodes []*redis.Client
	n     int
}

func newRedsyncLocker(nodes []*redis.Client) *redsyncLocker {
	pools := make([]redsyncredis.Pool, len(nodes))
	for i, c := range nodes {
		pools[i] = observedPool{Pool: goredis.NewPool(c), node: i}
	}
	return &redsyncLocker{rs: redsync.New(pools...), nodes: nodes, n: len(nodes)}
}

func (l *redsyncLocker) quorum() int { return l.n/2 + 1 }

// redsyncGuard is GuardRedsync: the critical section of GuardRedlock
// through go-redsync/redsync v4.
type redsyncGuard struct{ s *Service }

func newRedsyncGuard(s *Service) (guard, error) {
	if s.cfg.redsync == nil || s.cfg.redsync.n == 0 {
		return nil, fmt.Errorf("inventory: guard %s needs WithRedsyncNodes", s.guard)
	}
	return redsyncGuard{s}, nil
}

func (g redsyncGuard) reserve(ctx context.Context, req Request) (Reservation, Timing, error) {
	return g.s.withRedsync(ctx, req, func(ctx context.Context) (Reservation, error) {
		return g.s.readModifyWrite(ctx, req, writeBlind, 0)
	})
}

func (g redsyncGuard) ready(ctx context.Context) (int, int, error) {
	l := g.s.cfg.redsync
	up, quorum := l.ping(ctx)
	if up < quorum {
		return up, quorum, fmt.Errorf("inventory: redsync nodes: %d of %d answer, quorum %d", up, l.n, quorum)
	}
	return up, quorum, nil
}

// ping reports how many nodes answer PING, and the quorum.
func (l *redsyncLocker) ping(ctx context.Context) (up, quorum int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range l.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Ping(ctx).Err() == nil {
				mu.Lock()
				up++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return up, l.quorum()
}

// withRedsync is the classic critical section through redsync: a Mutex per
// reservation with the service's TTL as its expiry (every other option at
// redsync's default), LockContext bounded by the acquire timeout, body,
// UnlockContext in a deferred call. As with redlock, the validity is not
// checked before the write.
func (s *Service) withRedsync(ctx context.Context, req Request, body func(context.Context) (Reservation, error)) (r Reservation, t Timing, err error) {
	l := s.cfg.redsync
	key := lockKey(req.SKU)
	m := l.rs.NewMutex(key, redsync.WithExpiry(s.cfg.ttl))
	tr := &setNXTally{last: map[int]setNXOutcome{}}
	actx, cancel := context.WithTimeout(withTally(ctx, tr), s.cfg.acquireTimeout)
	start := time.Now()
	err = m.LockContext(actx)
	t.Acquire = time.Since(start)
	cancel()
	t.Attempts = tr.attempts(l.n)
	if err != nil {
		return Reservation{}, t, s.redsyncError(ctx, err, tr)
	}
	granted := time.Now()
	defer func() {
		released := time.Now()
		t.Hold = released.Sub(granted)
		// go-redis's default clients do not bound a command by the context
		// (ContextTimeoutEnabled is off): an unlock waits out their read
		// timeout on a silent node, as it would in redsync's users' code.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_, _ = m.UnlockContext(rctx)
		cancel()
		t.Release = time.Since(released)
		s.observe(Hold{Key: key, Holder: s.cfg.holder, Token: m.Value(), Granted: granted, Released: released, ValidUntil: m.Until()})
	}()
	r, err = body(ctx)
	return r, t, err
}

// redsyncError tells a held key from nodes that did not answer, by the SET
// NX replies of the last round: a quorum of grants that still failed ran
// out of validity (unavailable); too many errors to reach a quorum is
// unavailable; anything else lost to another holder (contended).
func (s *Service) redsyncError(ctx context.Context, err error, tr *setNXTally) error {
	if ctx.Err() != nil {
		return fmt.Errorf("inventory: acquire lock: %w", ctx.Err())
	}
	l := s.cfg.redsync
	granted, failed, seen := tr.lastRound()
	switch {
	case seen == 0:
		return fmt.Errorf("%w: redsync: no node answered a SET NX: %w", ErrUnavailable, err)
	case granted >= l.quorum():
		return fmt.Errorf("%w: redsync: %d of %d nodes granted, but the lock's validity ran out before the last one answered: %w",
			ErrUnavailable, granted, l.n, err)
	case failed > l.n-l.quorum():
		return fmt.Errorf("%w: redsync: %d of %d nodes failed the SET NX: %w", ErrUnavailable, failed, l.n, err)
	}
	var taken *redsync.ErrTaken
	if errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed) {
		return fmt.Errorf("%w: redsync: %w", ErrContended, err)
	}
	return fmt.Errorf("%w: redsync: %w", ErrUnavailable, err)
}

// setNXOutcome is one node's reply to one SET NX.
type setNXOutcome uint8

const (
	setNXGranted setNXOutcome = iota + 1
	setNXTaken
	setNXFailed
)

// setNXTally counts one acquire's SET NX replies: how many were sent and
// each node's latest reply.
type setNXTally struct {
	mu    sync.Mutex
	calls int
	last  map[int]setNXOutcome
}

func (t *setNXTally) record(node int, ok bool, err error) {
	o := setNXTaken
	switch {
	case err != nil:
		o = setNXFailed
	case ok:
		o = setNXGranted
	}
	t.mu.Lock()
	t.calls++
	t.last[node] = o
	t.mu.Unlock()
}

// attempts is how many rounds were sent to n nodes (a round cut short by
// the context counts).
func (t *setNXTally) attempts(n int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n == 0 {
		return 0
	}
	return (t.calls + n - 1) / n
}

// lastRound counts the nodes' latest replies.
func (t *setNXTally) lastRound() (granted, failed, seen int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range t.last {
		seen++
		switch o {
		case setNXGranted:
			granted++
		case setNXFailed:
			failed++
		}
	}
	return granted, failed, seen
}

type tallyKey struct{}

func withTally(ctx context.Context, t *setNXTally) context.Context {
	return context.WithValue(ctx, tallyKey{}, t)
}

// observedPool hands out connections that report their SET NX replies to
// the tally of the acquire they serve (found in the context redsync passes
// to Get); anything else goes through untouched.
type observedPool struct {
	redsyncredis.Pool
	node int
}

func (p observedPool) Get(ctx context.Context) (redsyncredis.Conn, error) {
	c, err := p.Pool.Get(ctx)
	if err != nil {
		return nil, err
	}
	if ctx == nil {
		return c, nil
	}
	if t, ok := ctx.Value(tallyKey{}).(*setNXTally); ok {
		return observedConn{Conn: c, tally: t, node: p.node}, nil
	}
	return c, nil
}

type observedConn struct {
	redsyncredis.Conn
	tally *setNXTally
	node  int
}

func (c observedConn) SetNX(name, value string, expiry time.Duration) (bool, error) {
	ok, err := c.Conn.SetNX(name, value, expiry)
	c.tally.record(c.node, ok, err)
	return ok, err
}

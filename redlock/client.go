package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Client acquires locks over a fixed set of independent Redis nodes. It is
// safe for concurrent use. Close it to end the background cleanup of failed
// attempts and releases; closing does not close the node clients, which
// belong to the caller.
type Client struct {
	nodes   []*redis.Client
	addrs   []string
	quorum  int
	cfg     config
	timeout time.Duration // per-attempt request timeout
	retry   Backoff       // between background release retries (settle)
	breaker *breaker      // nil when switched off

	// retrySlots[i] bounds the background release retries in flight to
	// node i (releaseRetryConcurrency).
	retrySlots []chan struct{}

	// limit bounds the acquire attempts in flight: adaptive, fixed
	// (WithMaxConcurrentAttempts) or nil when switched off; budget is the
	// retry budget (nil when off). See overload.go.
	limit  *limiter
	budget *retryBudget

	// heard[i] is when node i last answered anything (since epoch);
	// a node silent for silentAfter counts as down, not as slow.
	heard       []atomic.Int64
	silentAfter time.Duration

	// workers run the rounds' node requests; deadlines ends them.
	workers   *workers
	deadlines deadlines

	// mu guards closed and orders wg.Add before wg.Wait; done is closed with
	// closed set, to wake callers waiting for a slot.
	mu     sync.RWMutex
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

// New returns a Client over nodes, which must be independent masters (no
// replication between them). The quorum is len(nodes)/2+1. An even number of
// nodes is allowed but tolerates no more failures than one node fewer; Check
// reports it.
func New(nodes []*redis.Client, opts ...Option) (*Client, error) {
	if len(nodes) == 0 {
		return nil, errors.New("redlock: no nodes")
	}
	c := &Client{
		nodes:  append([]*redis.Client(nil), nodes...),
		addrs:  make([]string, len(nodes)),
		quorum: len(nodes)/2 + 1,
		cfg:    defaultConfig(),
		done:   make(chan struct{}),
	}
	for i, n := range nodes {
		if n == nil {
			return nil, fmt.Errorf("redlock: node %d is nil", i)
		}
		c.addrs[i] = n.Options().Addr
	}
	for _, o := range opts {
		o(&c.cfg)
	}
	switch {
	case c.cfg.maxConcurrent > 0:
		c.limit = newLimiter(c.cfg.maxConcurrent, true)
	case !c.cfg.overloadOff:
		c.limit = newLimiter(poolLimit(nodes), false)
	}
	if !c.cfg.overloadOff {
		c.budget = newRetryBudget(c.cfg.retryRatio, c.cfg.retryBurst)
	}
	c.timeout = c.cfg.timeout
	if c.timeout == 0 {
		for _, n := range nodes {
			c.timeout = max(c.timeout, n.Options().ReadTimeout)
		}
		if c.timeout <= 0 {
			c.timeout = DefaultNodeTimeout
		}
	}
	// As many idle workers as the pools can carry requests in flight.
	c.workers = newWorkers(max(poolLimit(nodes), 1) * len(nodes))
	c.silentAfter = max(10*c.timeout, time.Second)
	c.heard = make([]atomic.Int64, len(nodes))
	for i := range c.heard {
		c.heard[i].Store(int64(time.Since(epoch)))
	}
	c.retry = ExponentialBackoff(c.timeout, max(c.timeout, releaseRetryCap))
	c.retrySlots = make([]chan struct{}, len(nodes))
	for i := range c.retrySlots {
		c.retrySlots[i] = make(chan struct{}, releaseRetryConcurrency)
	}
	if !c.cfg.breakerOff {
		c.breaker = newBreaker(c.cfg.breakerThreshold, c.cfg.breakerCooldown, len(c.nodes), c.quorum, time.Now)
	}
	return c, nil
}

// Quorum returns the number of nodes that must agree: Size()/2+1.
func (c *Client) Quorum() int { return c.quorum }

// Size returns the number of nodes.
func (c *Client) Size() int { return len(c.nodes) }

// Close ends the background work of earlier operations and makes later
// operations fail with ErrClosed; callers still waiting for an attempt slot
// (see WithMaxConcurrentAttempts) return ErrClosed at once. It is idempotent
// and does not close the node clients.
//
// Background work is the release of the keys of failed attempts and of the
// nodes a Release did not wait for. Requests already in flight finish (each
// is bounded by the request timeout). A release still being retried on a node
// whose outcome is unknown (see the package documentation) makes one last
// try at once and stops, rather than retrying until the key's TTL has passed:
// a Close that waited for TTLs would hold up a shutdown for seconds or
// minutes, while one last try still catches a node that has resumed, so
// Close returns within about one request timeout. A key left behind by a node
// that is still stalled then expires at the end of its TTL.
func (c *Client) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	c.mu.Unlock()
	c.wg.Wait()
	c.workers.close()
	return nil
}

// enter reserves n background goroutines, or reports that the client is closed.
func (c *Client) enter(n int) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return false
	}
	c.wg.Add(n)
	return true
}

// gate asks the circuit breaker whether an acquire attempt may go out; with
// the breaker off every attempt may. A passNormal or passProbe must be
// reported back with passed.
func (c *Client) gate() (pass, BreakerState) {
	if c.breaker == nil {
		return passNormal, 0
	}
	return c.breaker.admit()
}

// passed reports to the breaker how an attempt that gate let through went,
// and returns the breaker's state afterwards (0 with the breaker off) and
// whether the attempt changed it.
func (c *Client) passed(p pass, h quorumHealth, nodes []NodeResult) (BreakerState, bool) {
	if c.breaker == nil {
		return 0, false
	}
	return c.breaker.done(p, h, nodes)
}

// reject reports an attempt that the breaker refused and returns its Event.
func (c *Client) reject(key string, ttl time.Duration, n int, state BreakerState) Event {
	ev := Event{
		Op:       OpAcquire,
		Key:      key,
		Attempt:  n,
		Quorum:   c.quorum,
		TTL:      ttl,
		Start:    time.Now(),
		Err:      ErrCircuitOpen,
		Breaker:  state,
		Rejected: true,
	}
	c.observe(ev)
	return ev
}

// Ping sends PING to every node in parallel and returns how many answered
// within the request timeout; err wraps ErrUnavailable when fewer than a
// quorum did, or the context's error.
func (c *Client) Ping(ctx context.Context) (up int, err error) {
	r, err := c.fanout(context.WithoutCancel(ctx), c.timeout, func(ctx context.Context, node *redis.Client, _ int) answer {
		if err := node.Ping(ctx).Err(); err != nil {
			return answer{err: err}
		}
		return answer{outcome: Granted}
	}, nil)
	if err != nil {
		return 0, err
	}
	t := r.collect(ctx, c.quorum, false)
	r.decide(true)
	if t.ctxErr != nil {
		return t.yes, fmt.Errorf("redlock: ping: %w", t.ctxErr)
	}
	if t.yes < c.quorum {
		return t.yes, fmt.Errorf("%w: %d of %d nodes answer PING, quorum %d", ErrUnavailable, t.yes, len(c.nodes), c.quorum)
	}
	return t.yes, nil
}

// NodeOption configures the go-redis clients made by NewNodes.
type NodeOption func(*redis.Options)

// WithNodeTimeout sets the dial, read and write timeout of each node client
// (default DefaultNodeTimeout, 50 ms), and the wait for a free pooled
// connection to half of it (see poolTimeout). Keep it a small fraction of the
// TTL: one attempt can take this long when a node is silent.
func WithNodeTimeout(d time.Duration) NodeOption {
	return func(o *redis.Options) {
		if d > 0 {
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = d, d, d
			o.PoolTimeout = poolTimeout(d)
		}
	}
}

// poolTimeout is how long a request waits for a free connection of a node
// client whose requests are bounded by timeout d: half of d. Every request
// runs under a context deadline of about d (ContextTimeoutEnabled), and that
// deadline also bounds the wait for a connection. With the wait allowed the
// whole of d, a slow node whose pool is exhausted (its late SETs and releases
// pile up behind each other) hands out connections with almost no budget
// left: the request is written, its deadline passes before the reply, and
// go-redis must close the connection, so the next request dials a new one
// (through the same slow link, again on a nearly spent budget). Capping the
// wait at d/2 sheds the excess before anything is sent instead, and every
// request that gets a connection keeps at least d/2 for the dial and the
// round trip.
func poolTimeout(d time.Duration) time.Duration { return d / 2 }

// WithPoolSize sets the connection pool size of each node client.
func WithPoolSize(n int) NodeOption {
	return func(o *redis.Options) { o.PoolSize = n }
}

// WithAuth sets the ACL user and password of each node client.
func WithAuth(user, pass string) NodeOption {
	return func(o *redis.Options) { o.Username, o.Password = user, pass }
}

// DefaultMinIdleConns is how many idle connections per node client NewNodes
// keeps open. go-redis dials them in the background, so a burst after a quiet
// spell, or after timeouts cost connections, finds connections ready instead
// of dialling on the request path, where a dial (through a proxy, on a busy
// machine) easily outlasts the node timeout.
const DefaultMinIdleConns = 4

// NewNodes returns one go-redis client per address, tuned for Redlock: short
// dial/read/write timeouts that honour the context, a wait for a pooled
// connection of half the node timeout, one dial attempt, and go-redis's own
// command retries off (a retry would spend the validity budget; the attempt
// loop is the retry), with DefaultMinIdleConns idle connections kept open.
// The caller closes them.
func NewNodes(addrs []string, opts ...NodeOption) []*redis.Client {
	out := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		o := &redis.Options{
			Addr:                  a,
			DialTimeout:           DefaultNodeTimeout,
			ReadTimeout:           DefaultNodeTimeout,
			WriteTimeout:          DefaultNodeTimeout,
			PoolTimeout:           poolTimeout(DefaultNodeTimeout),
			MinIdleConns:          DefaultMinIdleConns,
			MaxRetries:            -1,
			DialerRetries:         1,
			ContextTimeoutEnabled: true,
			// RESP2 (no push messages to handle) and no CLIENT SETINFO:
			// the connection handshake is a single HELLO round trip.
			Protocol:        2,
			DisableIdentity: true,
			MaintNotificationsConfig: &maintnotifications.Config{
				Mode: maintnotifications.ModeDisabled,
			},
		}
		WithTLS(nil)(o)
		for _, opt := range opts {
			opt(o)
		}
		if o.TLSConfig != nil {
			o.DialTimeout = max(o.DialTimeout, MinTLSDialTimeout)
		}
		out[i] = redis.NewClient(o)
	}
	return out
}

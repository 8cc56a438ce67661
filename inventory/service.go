// Package inventory is the lab's protected resource: a stock reservation
// service whose read-modify-write of a SKU's stock is guarded one of
// several ways (see Guards; Comparisons adds one that exists only to show a
// mistake), with every committed reservation written to a ledger in the
// same transaction as the stock change. After any run, Store.Audit
// proves whether stock was conserved (initial − final = Σ ledger), oversold,
// or defended by fencing.
//
// The reservation path is a library (Service.Reserve) so a load generator
// can run several replicas in one process; NewHandler is a thin HTTP layer
// over it. The store is SQLite ("sqlite:PATH", the default) or Postgres.
package inventory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/redlocklab/redlocklab/inventory/internal/wire"
	"github.com/redlocklab/redlocklab/redlock"
)

// Input limits, enforced by Request.Validate, Store.Seed and the HTTP API.
const (
	MaxSKULen       = wire.MaxSKULen
	MaxRequestIDLen = wire.MaxRequestIDLen
	MaxQuantity     = wire.MaxQuantity
	MaxStock        = wire.MaxStock
)

// Defaults for a Service's lock.
const (
	DefaultLockTTL        = 10 * time.Second
	DefaultAcquireTimeout = 3 * time.Second
	// releaseTimeout bounds the deferred release, which runs even when the
	// caller's context is already done.
	releaseTimeout = 2 * time.Second
)

// Request asks for Quantity units of SKU. RequestID makes the request
// idempotent: the same ID never reserves twice.
type Request struct {
	SKU       string
	Quantity  int64
	RequestID string
}

// Validate checks the request's fields; the error wraps ErrInvalid.
func (r Request) Validate() error {
	for _, fe := range []*wire.FieldError{wire.CheckSKU(r.SKU), wire.CheckQuantity(r.Quantity), wire.CheckRequestID(r.RequestID)} {
		if fe != nil {
			return &fieldError{field: fe.Field, msg: fe.Msg}
		}
	}
	return nil
}

// validSKU: 1..64 characters of [A-Za-z0-9._:-].
func validSKU(sku string) error {
	if fe := wire.CheckSKU(sku); fe != nil {
		return &fieldError{field: fe.Field, msg: fe.Msg}
	}
	return nil
}

// Reservation is a committed reservation, as written to the ledger.
type Reservation struct {
	ID        int64
	RequestID string
	SKU       string
	Quantity  int64
	Guard     Guard
	Holder    string
	// Fence is the fencing token the write carried (fenced guards), else 0.
	Fence     int64
	CreatedAt time.Time
	// StockAfter is the stock the reservation left behind, as the ledger
	// keeps it (-1 for a row written before the ledger kept it).
	StockAfter int64
	// Replayed is true when RequestID had already reserved: this is the
	// original reservation and nothing was reserved now.
	Replayed bool
	Timing   Timing
}

// Timing is what the lock cost one reservation. Guards without a lock
// report only Hold (the critical section: read to commit). The optimistic
// guard (GuardDBVersion) has no lock but retries: its Acquire is the time
// spent before its last try (the tries that lost and their backoff), Hold
// the last try, Attempts its tries and Conflicts the tries it lost.
type Timing struct {
	// Acquire is the wall time of the whole acquire, retries included.
	Acquire time.Duration
	// Hold runs from the grant to the start of the release.
	Hold time.Duration
	// Release is the wall time of the release.
	Release time.Duration
	// Attempts made to acquire (0 without a lock).
	Attempts int
	// Conflicts are the optimistic tries whose write found the row changed
	// since their read (GuardDBVersion; 0 for every other guard).
	Conflicts int
}

// Hold is one holder's tenure of a lock, on this process's clock: the one
// type of a tenure, which the load generator's checker
// (loadgen.HoldChecker) and the drill's history (drill.HoldRecord, its wire
// form) use as it is. Two holds of one key whose [Granted, Released)
// intervals overlap are a double grant, and a lock violation when the overlap
// falls before both holders' ValidUntil. ValidUntil is when the lock's
// validity ran out as its client computed it at the grant (for Redlock, the
// Lock's Deadline; for the single-node lock, the winning SET's send time plus
// the TTL); it carries a monotonic reading.
type Hold struct {
	Key, Holder, Token string
	Granted, Released  time.Time
	ValidUntil         time.Time
}

// PauseHook runs inside the critical section, after the stock was read and
// before it is written (for db-atomic: before the atomic update). It is a
// fault hook: a pause longer than the lock's validity reproduces the
// process-pause scenario of the Redlock debate. A hook that simulates a
// stop-the-world pause may ignore ctx, exactly as a paused process would.
type PauseHook func(ctx context.Context, req Request)

// ServiceOption configures NewService.
type ServiceOption func(*serviceConfig)

type serviceConfig struct {
	ttl            time.Duration
	acquireTimeout time.Duration
	holder         string
	onHold         func(Hold)
	pause          PauseHook
	single         *redis.Client
	delNodes       []*redis.Client
	redsync        *redsyncLocker
	etcd           *clientv3.Client
	reg            prometheus.Registerer
}

// WithLockTTL sets the lock's time to live (default DefaultLockTTL).
func WithLockTTL(d time.Duration) ServiceOption {
	return func(c *serviceConfig) { c.ttl = d }
}

// WithAcquireTimeout bounds how long Reserve waits for the lock before
// giving up with ErrContended or ErrUnavailable (default DefaultAcquireTimeout).
func WithAcquireTimeout(d time.Duration) ServiceOption {
	return func(c *serviceConfig) { c.acquireTimeout = d }
}

// WithHolder names this replica in the ledger and in Holds (default
// host-pid-random).
func WithHolder(name string) ServiceOption {
	return func(c *serviceConfig) { c.holder = name }
}

// WithHoldObserver is called after every released lock with its tenure. It
// is called concurrently and must not block.
func WithHoldObserver(fn func(Hold)) ServiceOption {
	return func(c *serviceConfig) { c.onHold = fn }
}

// WithPauseHook installs a fault hook inside the critical section.
func WithPauseHook(h PauseHook) ServiceOption {
	return func(c *serviceConfig) { c.pause = h }
}

// WithMetrics records every reservation on reg: outcomes, durations,
// in-flight count, store latency and the lock TTL (see the metrics of
// NewHandler, which then leaves the reservations to the service). Services
// sharing a registry share the collectors.
func WithMetrics(reg prometheus.Registerer) ServiceOption {
	return func(c *serviceConfig) { c.reg = reg }
}

// WithSingleNode is the one Redis node of the redis-single guard.
func WithSingleNode(c *redis.Client) ServiceOption {
	return func(cfg *serviceConfig) { cfg.single = c }
}

// WithDeleteNodes are the lock nodes the redlock-del guard sends its plain
// DEL to on release (the Redlock client's nodes).
func WithDeleteNodes(nodes []*redis.Client) ServiceOption {
	return func(cfg *serviceConfig) { cfg.delNodes = nodes }
}

// WithRedsyncNodes are the lock nodes of the redsync guard: go-redis
// clients as redsync's users build them (see ReplicaConfig), one
// goredis/v9 pool each.
func WithRedsyncNodes(nodes []*redis.Client) ServiceOption {
	return func(cfg *serviceConfig) { cfg.redsync = newRedsyncLocker(nodes) }
}

// WithEtcd is the etcd client of the etcd guards. The Service takes its
// locks through it on sessions of its own, which Close ends; closing the
// client stays the caller's.
func WithEtcd(c *clientv3.Client) ServiceOption {
	return func(cfg *serviceConfig) { cfg.etcd = c }
}

// Service reserves stock through one guard. It is safe for concurrent use;
// a replica is one Service with its own lock client.
type Service struct {
	store  *Store
	guard  Guard
	g      guard
	locker *redlock.Client
	cfg    serviceConfig
	m      *metrics // nil without WithMetrics
}

// NewService returns a replica reserving from store through guard. locker
// is the Redlock client of the redlock guards and nil otherwise; the
// redis-single guard needs WithSingleNode, the etcd guards WithEtcd (and a
// lock TTL of at least MinEtcdLockTTL). Close it when done.
func NewService(store *Store, guard Guard, locker *redlock.Client, opts ...ServiceOption) (*Service, error) {
	cfg := serviceConfig{ttl: DefaultLockTTL, acquireTimeout: DefaultAcquireTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if store == nil {
		return nil, errors.New("inventory: nil store")
	}
	if !guard.known() {
		return nil, fmt.Errorf("inventory: unknown guard %q", guard)
	}
	if err := guard.CheckTTL(cfg.ttl); err != nil {
		return nil, err
	}
	if cfg.acquireTimeout <= 0 {
		return nil, fmt.Errorf("inventory: acquire timeout must be positive, got %v", cfg.acquireTimeout)
	}
	if cfg.holder == "" {
		host, _ := os.Hostname()
		cfg.holder = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(3))
	}
	s := &Service{store: store, guard: guard, locker: locker, cfg: cfg}
	e, _ := guard.entry()
	g, err := e.build(s)
	if err != nil {
		return nil, err
	}
	s.g = g
	if cfg.reg != nil {
		if s.m, err = newMetrics(cfg.reg); err != nil {
			return nil, err
		}
		// Every outcome from the start at 0, so that a ratio of one of
		// them (contended, say) is 0 rather than absent until it happens.
		for _, o := range outcomes {
			s.m.reservations.WithLabelValues(string(guard), o)
		}
		s.m.inFlight.WithLabelValues(string(guard))
		if guard.Locks() {
			s.m.lockTTL.WithLabelValues(string(guard)).Set(cfg.ttl.Seconds())
		}
	}
	return s, nil
}

// Close ends what the guard keeps open between reservations (the etcd
// guards' sessions: their keep-alives stop and their leases are revoked);
// the clients handed to NewService stay open. Call it after the last
// Reserve has returned. It is idempotent.
func (s *Service) Close() error {
	if c, ok := s.g.(interface{ close() error }); ok {
		return c.close()
	}
	return nil
}

// metered reports whether the service records its reservations itself
// (WithMetrics).
func (s *Service) metered() bool { return s.m != nil }

// Guard returns the service's guard.
func (s *Service) Guard() Guard { return s.guard }

// Holder returns the replica's name.
func (s *Service) Holder() string { return s.cfg.holder }

// Store returns the service's store.
func (s *Service) Store() *Store { return s.store }

// Reserve takes req.Quantity units of req.SKU through the service's guard.
// A request ID that already reserved returns the original with Replayed set.
// Failures are *ReserveError wrapping ErrInvalid, ErrNotFound,
// ErrOutOfStock, ErrContended, ErrUnavailable, ErrOverloaded, ErrFenced, ErrConflict, ErrRequestIDReused,
// a context error or a store error.
func (s *Service) Reserve(ctx context.Context, req Request) (Reservation, error) {
	if s.m == nil {
		return s.reserve(ctx, req)
	}
	inFlight := s.m.inFlight.WithLabelValues(string(s.guard))
	inFlight.Inc()
	defer inFlight.Dec()
	start := time.Now()
	r, err := s.reserve(ctx, req)
	t := r.Timing
	var re *ReserveError
	if errors.As(err, &re) {
		t = re.Timing
	}
	s.m.observe(s.guard, r, err, t, time.Since(start).Seconds())
	return r, err
}

func (s *Service) reserve(ctx context.Context, req Request) (Reservation, error) {
	if err := req.Validate(); err != nil {
		return Reservation{}, &ReserveError{Err: err}
	}
	if orig, ok, err := s.lookup(ctx, req.RequestID); err != nil {
		return Reservation{}, &ReserveError{Err: err}
	} else if ok {
		return replay(orig, req, Timing{})
	}

	r, t, err := s.g.reserve(ctx, req)
	if errors.Is(err, errReplay) {
		orig, ok, lerr := s.lookup(ctx, req.RequestID)
		if lerr != nil {
			return Reservation{}, &ReserveError{Timing: t, Err: lerr}
		}
		if !ok {
			return Reservation{}, &ReserveError{Timing: t, Err: fmt.Errorf("inventory: request %q conflicted but is not in the ledger", req.RequestID)}
		}
		return replay(orig, req, t)
	}
	if err != nil {
		return Reservation{}, &ReserveError{Timing: t, Err: err}
	}
	r.Timing = t
	return r, nil
}

// replay answers a repeated request ID with the original reservation, or
// ErrRequestIDReused when the ID was used for something else.
func replay(orig Reservation, req Request, t Timing) (Reservation, error) {
	if orig.SKU != req.SKU || orig.Quantity != req.Quantity {
		return Reservation{}, &ReserveError{Timing: t, Err: fmt.Errorf("%w: %q reserved %d of %q",
			ErrRequestIDReused, req.RequestID, orig.Quantity, orig.SKU)}
	}
	orig.Replayed = true
	orig.Timing = t
	return orig, nil
}

// readModifyWrite is the critical section the lock guards protect, and
// one try of the optimistic guard: read the stock (and the row's version,
// which only writeVersioned uses), decide, (pause), write the computed
// value.
func (s *Service) readModifyWrite(ctx context.Context, req Request, mode writeMode, token int64) (Reservation, error) {
	stock, version, err := s.read(ctx, req.SKU)
	if err != nil {
		return Reservation{}, err
	}
	if stock < req.Quantity {
		return Reservation{}, outOfStock(req, stock)
	}
	s.pause(ctx, req)
	return s.apply(ctx, write{
		mode: mode, req: req, newStock: stock - req.Quantity, fence: token, column: s.guard.fenceColumn(), version: version,
		guard: s.guard, holder: s.cfg.holder,
	})
}

// outOfStock is ErrOutOfStock for req against the stock found.
func outOfStock(req Request, stock int64) error {
	return fmt.Errorf("%w: sku %q has %d, want %d", ErrOutOfStock, req.SKU, stock, req.Quantity)
}

func (s *Service) pause(ctx context.Context, req Request) {
	if s.cfg.pause != nil {
		s.cfg.pause(ctx, req)
	}
}

// Readiness is what the service depends on, as /readyz reports it.
type Readiness struct {
	// Store is nil when the store answered a ping.
	Store error
	// Lock is nil when enough lock nodes answered (a quorum for Redlock, the
	// node for redis-single); always nil for guards without a lock.
	Lock error
	// NodesUp and Quorum describe the lock nodes (0 without a lock).
	NodesUp, Quorum int
}

// Ready reports whether every dependency answered.
func (r Readiness) Ready() bool { return r.Store == nil && r.Lock == nil }

// Readiness pings the store and the lock nodes.
func (s *Service) Readiness(ctx context.Context) Readiness {
	r := Readiness{Store: s.store.Ping(ctx)}
	r.NodesUp, r.Quorum, r.Lock = s.g.ready(ctx)
	return r
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}

func (s *Service) observe(h Hold) {
	if s.cfg.onHold != nil {
		s.cfg.onHold(h)
	}
}

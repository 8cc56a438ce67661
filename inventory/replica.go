package inventory

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
	"github.com/redlocklab/redlocklab/redlock/redlockprom"
)

// ReplicaConfig is everything one replica of the service is built from: its
// store, its guard and, for the guards that lock, its own lock nodes'
// clients. Zero values take the defaults.
type ReplicaConfig struct {
	// StoreDSN is "sqlite:PATH" or a postgres:// URL (see OpenStore).
	StoreDSN string
	Guard    Guard
	// Nodes are the lock nodes, host:port, for the guards that lock
	// (Guard.NeedsNodes); redis-single uses the first. Ignored otherwise.
	Nodes []string
	// NodeTimeout is each node client's dial, read and write timeout (0:
	// redlock.DefaultNodeTimeout; for the redsync guard, go-redis's own
	// defaults, as redsync's users get them).
	NodeTimeout time.Duration
	// PoolSize is each node client's connection pool (0: go-redis default).
	PoolSize int
	// Username and Password authenticate to the lock nodes (Redis ACL; an
	// empty Username with a Password is the default user). Empty: no AUTH.
	Username, Password string
	// TLS, when set, makes every lock node client speak TLS with it
	// (redlock.WithTLS; nodeaddr builds it from a rediss:// node list and
	// PEM files), the redsync guard's clients too. Nil: plain TCP.
	TLS *tls.Config
	// TLSFiles are the PEM files and server name behind TLS, for the
	// guards whose lock client is not this process's: a foreign guard's
	// adapter verifies the nodes with them (see AdapterConfig).
	TLSFiles nodeaddr.TLSFiles
	// LogDir, when set, receives the logs of what the replica runs beside
	// it: a foreign guard's adapter writes its stderr to
	// adapter-<Holder>.log there. Empty: this process's stderr.
	LogDir string
	// Etcd are the etcd cluster's client URLs (http://host:port), for the
	// guards that lock on etcd (Guard.NeedsEtcd). Ignored otherwise.
	Etcd []string
	// EtcdDialTimeout is the etcd client's DialTimeout (0:
	// DefaultEtcdDialTimeout). The client connects in the background: a
	// replica starts with its cluster down, and its reservations fail with
	// ErrUnavailable until it answers.
	EtcdDialTimeout time.Duration
	// LockTTL and AcquireTimeout (0: DefaultLockTTL, DefaultAcquireTimeout).
	LockTTL        time.Duration
	AcquireTimeout time.Duration
	// Holder names the replica in the ledger and in holds (default
	// host-pid-random).
	Holder string
	// Observer receives the Redlock client's per-attempt events (nil: none).
	Observer redlock.Observer
	// Registerer, when set, gets the service's metrics (WithMetrics) and,
	// for the Redlock guards, the lock client's (redlock/redlockprom),
	// labelled with the guard so that several guards can share it. Replicas
	// sharing a registerer share the collectors.
	Registerer prometheus.Registerer
	// MaxConcurrentAttempts bounds the Redlock client's concurrent acquire
	// attempts (redlock.WithMaxConcurrentAttempts; 0: the client's adaptive
	// limit).
	MaxConcurrentAttempts int
	// NoOverloadControl switches the Redlock client's overload control off
	// (redlock.WithOverloadControl(false)): to measure what it prevents.
	NoOverloadControl bool
	// OnHold receives every lock tenure (WithHoldObserver).
	OnHold func(Hold)
	// PauseHook runs inside every critical section (WithPauseHook).
	PauseHook PauseHook
}

// DefaultEtcdDialTimeout is ReplicaConfig.EtcdDialTimeout's default.
const DefaultEtcdDialTimeout = 2 * time.Second

// EtcdKeepAliveTime and EtcdKeepAliveTimeout are the etcd client's gRPC
// keep-alive: a ping after this long without traffic, and the connection
// closed when its answer does not come in time. Without them (clientv3's
// default) a connection to a member whose traffic is lost, as behind a
// partition, is never found dead: a request sent on it waits forever, and
// concurrency.Mutex.Lock, whose clean-up after a failed wait runs on the
// client's own context (not the caller's), never returns. Measured in the
// etcd-leader-loss drill, where a partitioned leader's clients hung past
// the end of the run. 5 s is the etcd server's default
// --grpc-keepalive-min-time: pinging more often is answered by a GOAWAY.
const (
	EtcdKeepAliveTime    = 5 * time.Second
	EtcdKeepAliveTimeout = 3 * time.Second
)

// Replica is one replica of the service with everything it opened: a store
// handle, the lock nodes' clients and the Redlock client, or the etcd
// client. It is what `redlab
// serve` runs and what the load generator runs several of in one process.
type Replica struct {
	svc    *Service
	store  *Store
	nodes  []*redis.Client
	locker *redlock.Client
	etcd   *clientv3.Client

	closeOnce sync.Once
	closeErr  error
}

// OpenReplica opens the store (applying its migrations), connects the lock
// nodes the guard needs and builds the service. Nothing is left open when
// it fails.
func OpenReplica(ctx context.Context, cfg ReplicaConfig) (_ *Replica, err error) {
	if !cfg.Guard.known() {
		return nil, fmt.Errorf("inventory: unknown guard %q", cfg.Guard)
	}
	if cfg.Guard.NeedsNodes() && len(cfg.Nodes) == 0 {
		return nil, fmt.Errorf("inventory: guard %s needs lock nodes", cfg.Guard)
	}
	if cfg.Guard.NeedsEtcd() && len(cfg.Etcd) == 0 {
		return nil, fmt.Errorf("inventory: guard %s needs etcd endpoints", cfg.Guard)
	}
	if cfg.EtcdDialTimeout < 0 {
		return nil, fmt.Errorf("inventory: etcd dial timeout %v must not be negative", cfg.EtcdDialTimeout)
	}
	if cfg.NodeTimeout < 0 || cfg.PoolSize < 0 || cfg.MaxConcurrentAttempts < 0 {
		return nil, fmt.Errorf("inventory: node timeout %v, pool size %d, max concurrent attempts %d: none may be negative",
			cfg.NodeTimeout, cfg.PoolSize, cfg.MaxConcurrentAttempts)
	}
	r := &Replica{}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if r.store, err = OpenStore(ctx, cfg.StoreDSN); err != nil {
		return nil, err
	}
	opts := []ServiceOption{WithHoldObserver(cfg.OnHold), WithPauseHook(cfg.PauseHook)}
	if cfg.Registerer != nil {
		opts = append(opts, WithMetrics(cfg.Registerer))
	}
	if cfg.LockTTL != 0 {
		opts = append(opts, WithLockTTL(cfg.LockTTL))
	}
	if cfg.AcquireTimeout != 0 {
		opts = append(opts, WithAcquireTimeout(cfg.AcquireTimeout))
	}
	if cfg.Holder != "" {
		opts = append(opts, WithHolder(cfg.Holder))
	}
	if cfg.Guard.foreign() {
		ac := AdapterConfig{Nodes: cfg.Nodes, TLS: cfg.TLS != nil, TLSFiles: cfg.TLSFiles, Username: cfg.Username, Password: cfg.Password}
		if cfg.LogDir != "" {
			ac.LogFile = filepath.Join(cfg.LogDir, "adapter-"+cmp.Or(cfg.Holder, "replica")+".log")
		}
		opts = append(opts, WithAdapter(ac))
	} else if cfg.Guard == GuardRedsync {
		r.nodes = redsyncNodes(cfg)
		opts = append(opts, WithRedsyncNodes(r.nodes))
	} else if cfg.Guard.NeedsNodes() {
		nodeOpts := []redlock.NodeOption{redlock.WithTLS(cfg.TLS)}
		if cfg.NodeTimeout > 0 {
			nodeOpts = append(nodeOpts, redlock.WithNodeTimeout(cfg.NodeTimeout))
		}
		if cfg.PoolSize > 0 {
			nodeOpts = append(nodeOpts, redlock.WithPoolSize(cfg.PoolSize))
		}
		if cfg.Username != "" || cfg.Password != "" {
			nodeOpts = append(nodeOpts, redlock.WithAuth(cfg.Username, cfg.Password))
		}
		addrs := cfg.Nodes
		if !cfg.Guard.redlock() {
			addrs = addrs[:1] // redis-single locks on one node
		}
		r.nodes = redlock.NewNodes(addrs, nodeOpts...)
		if cfg.Guard.redlock() {
			var ropts []redlock.Option
			observers := []redlock.Observer{}
			if cfg.Observer != nil {
				observers = append(observers, cfg.Observer)
			}
			if cfg.Registerer != nil {
				m, err := redlockprom.New(prometheus.WrapRegistererWith(prometheus.Labels{"guard": string(cfg.Guard)}, cfg.Registerer))
				if err != nil {
					return nil, fmt.Errorf("inventory: lock metrics: %w", err)
				}
				observers = append(observers, m.Observer())
			}
			if o := redlock.Observers(observers...); o != nil {
				ropts = append(ropts, redlock.WithObserver(o))
			}
			if cfg.MaxConcurrentAttempts > 0 {
				ropts = append(ropts, redlock.WithMaxConcurrentAttempts(cfg.MaxConcurrentAttempts))
			}
			if cfg.NoOverloadControl {
				ropts = append(ropts, redlock.WithOverloadControl(false))
			}
			if r.locker, err = redlock.New(r.nodes, ropts...); err != nil {
				return nil, fmt.Errorf("inventory: %w", err)
			}
			if cfg.Guard == GuardRedlockDel {
				opts = append(opts, WithDeleteNodes(r.nodes))
			}
		} else {
			opts = append(opts, WithSingleNode(r.nodes[0]))
		}
	}
	if cfg.Guard.NeedsEtcd() {
		dial := cfg.EtcdDialTimeout
		if dial == 0 {
			dial = DefaultEtcdDialTimeout
		}
		// No logger: the client's failures reach the caller as errors of
		// Reserve and Readiness, and its retry warnings would flood a load
		// run's terminal. Keep-alive pings, as etcdctl sends them: see
		// EtcdKeepAliveTime.
		if r.etcd, err = clientv3.New(clientv3.Config{Endpoints: cfg.Etcd, DialTimeout: dial, Logger: zap.NewNop(),
			DialKeepAliveTime: EtcdKeepAliveTime, DialKeepAliveTimeout: EtcdKeepAliveTimeout}); err != nil {
			return nil, fmt.Errorf("inventory: etcd client: %w", err)
		}
		opts = append(opts, WithEtcd(r.etcd))
	}
	if r.svc, err = NewService(r.store, cfg.Guard, r.locker, opts...); err != nil {
		return nil, err
	}
	return r, nil
}

// redsyncNodes builds the redsync guard's node clients the way redsync's
// own documentation and its users do, redis.NewClient(&redis.Options{Addr:
// …}): go-redis's defaults for everything (timeouts, retries, pool, dial
// retries, context deadlines not applied to the socket), plus the login.
// Only a NodeTimeout or PoolSize given on purpose replaces a default. The
// dialer is redlock's (redlock.WithTLS): go-redis's own TCP dial and TLS
// handshake, with the same plain-words errors as the Redlock guards' clients.
func redsyncNodes(cfg ReplicaConfig) []*redis.Client {
	out := make([]*redis.Client, len(cfg.Nodes))
	for i, a := range cfg.Nodes {
		o := &redis.Options{Addr: a, Username: cfg.Username, Password: cfg.Password}
		if cfg.NodeTimeout > 0 {
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = cfg.NodeTimeout, cfg.NodeTimeout, cfg.NodeTimeout
		}
		if cfg.PoolSize > 0 {
			o.PoolSize = cfg.PoolSize
		}
		redlock.WithTLS(cfg.TLS)(o)
		out[i] = redis.NewClient(o)
	}
	return out
}

// Service is the replica's reservation service.
func (r *Replica) Service() *Service { return r.svc }

// Store is the replica's store handle.
func (r *Replica) Store() *Store { return r.store }

// Warm opens conns connections to every lock node before traffic arrives,
// retrying a node for up to a second: a cold pool hit by a burst dials every
// node at once under the short node timeout, and on a busy machine those
// dials time out and the acquires that needed them fail. Nodes that stay
// unreachable are left for the traffic to report.
func (r *Replica) Warm(ctx context.Context, conns int) {
	var wg sync.WaitGroup
	for _, c := range r.nodes {
		for i := 0; i < conns; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for attempt := 0; attempt < 20 && ctx.Err() == nil; attempt++ {
					if c.Ping(ctx).Err() == nil {
						return
					}
					select {
					case <-time.After(50 * time.Millisecond):
					case <-ctx.Done():
					}
				}
			}()
		}
	}
	wg.Wait()
}

// PingNodes sends PING to every lock node client once, in parallel, and
// returns each one's error (nil: it answered), in the order of
// ReplicaConfig.Nodes; nil for a guard without lock nodes. It is for a
// start-up report: a node whose TLS handshake fails says why here (see
// redlock.ConnError), rather than only as a count of nodes up.
func (r *Replica) PingNodes(ctx context.Context) []error {
	if len(r.nodes) == 0 {
		return nil
	}
	errs := make([]error, len(r.nodes))
	var wg sync.WaitGroup
	for i, c := range r.nodes {
		wg.Go(func() { errs[i] = c.Ping(ctx).Err() })
	}
	wg.Wait()
	return errs
}

// Close closes what the replica opened, in dependency order: the service
// (the etcd guards revoke their sessions' leases through the etcd client),
// the Redlock client (it waits for its background releases, which need the
// node clients), then the lock clients, then the store. It is idempotent.
func (r *Replica) Close() error {
	r.closeOnce.Do(func() {
		var errs []error
		if r.svc != nil {
			errs = append(errs, r.svc.Close())
		}
		if r.etcd != nil {
			errs = append(errs, r.etcd.Close())
		}
		if r.locker != nil {
			errs = append(errs, r.locker.Close())
		}
		for _, n := range r.nodes {
			errs = append(errs, n.Close())
		}
		if r.store != nil {
			errs = append(errs, r.store.Close())
		}
		r.closeErr = errors.Join(errs...)
	})
	return r.closeErr
}

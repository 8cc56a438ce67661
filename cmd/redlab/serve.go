package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/drill"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/redlock"
)

// serveOptions are the flags of `redlab serve`.
type serveOptions struct {
	nodesFlag       nodesFlag
	tlsFlags        tlsFlags
	tls             *tls.Config // resolved by validate; nil for plain nodes
	etcdFlag        etcdFlag
	guardName       string
	nodes           []string // resolved by validate; empty for guards without a lock
	etcd            []string // resolved by validate; empty but for the etcd guards
	store           string
	guard           inventory.Guard
	listen          string
	lockTTL         time.Duration
	acquireTimeout  time.Duration
	nodeTimeout     time.Duration
	shutdownTimeout time.Duration
	holder          string
	login           login
	user, password  string // resolved by validate
	faultHooks      bool
	faultSigstop    bool
	faultPause      time.Duration
	faultFraction   float64
	drillEvents     string
	listenFD        int
}

func newServeCmd(e *env) *cobra.Command {
	o := &serveOptions{}
	c := &cobra.Command{
		Use:   "serve",
		Short: "run the inventory reservation service (HTTP API)",
		Long: `Runs the inventory reservation service: POST /v1/reservations, GET|PUT
/v1/stock/{sku}, /healthz, /readyz, /metrics (see inventory/openapi.yaml).
--nodes (or $REDLAB_NODES) is needed by the guards that lock: redis-single
(uses the first node), redlock, redlock-fenced and redsync (go-redsync/redsync
v4 with its own defaults over go-redis clients with theirs). none,
db-atomic, db-version and db-for-update need no nodes: the store decides.
--etcd (or $REDLAB_ETCD) is needed by etcd and etcd-fenced, whose --lock-ttl
is at least 2s (etcd's shortest lease) and rounded up to whole seconds.

The first SIGINT/SIGTERM drains: no new connections, in-flight reservations
finish and release their locks. A second one exits at once.
Exit 0 after a clean drain, 1 on failure, 2 on a usage error.`,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := o.validate(c.Flags()); err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			return o.run(c.Context(), e)
		},
	}
	fs := c.Flags()
	fs.Var(&o.nodesFlag, "nodes", "Redis nodes of the lock (default $"+envNodes+")"+nodesUsage)
	o.tlsFlags.register(fs)
	fs.Var(&o.etcdFlag, "etcd", "etcd client URLs of the etcd guards' lock (default $"+envEtcd+")")
	fs.StringVar(&o.store, "store", "sqlite:.redlab/inventory.db", "inventory database: sqlite:PATH or postgres://...")
	fs.StringVar(&o.guardName, "guard", string(inventory.GuardRedlock), "how reservations are protected: "+inventory.JoinGuards(inventory.Guards()))
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "HTTP listen address, host:port (port 0 picks a free one)")
	fs.DurationVar(&o.lockTTL, "lock-ttl", inventory.DefaultLockTTL, "lock time to live")
	fs.DurationVar(&o.acquireTimeout, "acquire-timeout", inventory.DefaultAcquireTimeout, "how long a reservation waits for its lock (db-for-update on PostgreSQL: the row lock, as lock_timeout) before answering 503 contended")
	fs.DurationVar(&o.nodeTimeout, "node-timeout", redlock.DefaultNodeTimeout, "per-node dial/read/write timeout of the lock client (redsync: go-redis's own defaults unless given)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 60*time.Second, "how long the first signal waits for in-flight requests")
	fs.StringVar(&o.holder, "holder", "", "this replica's name in the ledger (default host-pid-random)")
	o.login.register(fs, node.UserRedlock)
	fs.BoolVar(&o.faultHooks, "fault-hooks", false, "enable fault injection: POST /v1/faults/pause and the --fault-pause flags")
	fs.BoolVar(&o.faultSigstop, "fault-hooks-sigstop", false, "UNSAFE, drills only: with --fault-hooks, POST /v1/faults/pause {\"scope\":\"process\"} makes the next holders stop this whole process with SIGSTOP; only a SIGCONT from outside (redlab drill sends it) wakes it. Never in production")
	fs.StringVar(&o.drillEvents, "drill-events", "", "drills only: write every lock tenure and process pause to this file (or inherited pipe, /dev/fd/N) as JSON lines, times on CLOCK_MONOTONIC (see drill.EventWriter)")
	fs.IntVar(&o.listenFD, "listen-fd", 0, "serve on this inherited listening socket (a file descriptor, 3 or more, as a supervisor passes it) instead of --listen")
	fs.DurationVar(&o.faultPause, "fault-pause", 0, "with --fault-hooks: pause this long inside the critical section of --fault-fraction of the reservations")
	fs.Float64Var(&o.faultFraction, "fault-fraction", 0, "with --fault-pause: the share of reservations to pause, 0..1")
	return c
}

// validate checks the flags; it has no side effects.
func (o *serveOptions) validate(fs *pflag.FlagSet) error {
	g, err := inventory.ParseGuard(o.guardName)
	if err != nil {
		return err
	}
	o.guard = g
	if g.NeedsNodes() {
		nodes, err := o.nodesFlag.orEnv()
		if err != nil {
			return fmt.Errorf("guard %s: %w", g, err)
		}
		if o.tls, err = o.tlsFlags.config(nodes); err != nil {
			return err
		}
		o.nodes = nodes.Addrs
		if o.user, o.password, err = o.login.resolve(); err != nil {
			return err
		}
	}
	if g.NeedsEtcd() {
		if o.etcd, err = o.etcdFlag.orEnv(); err != nil {
			return fmt.Errorf("guard %s: %w", g, err)
		}
	}
	if err := inventory.CheckDSN(o.store); err != nil {
		return fmt.Errorf("--store: %w", err)
	}
	_, port, err := net.SplitHostPort(o.listen) // an empty host is every interface
	if err != nil {
		return fmt.Errorf("--listen %q: want host:port: %w", o.listen, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("--listen %q: port must be 0-65535", o.listen)
	}
	if o.lockTTL < time.Millisecond {
		return fmt.Errorf("--lock-ttl must be at least 1ms, got %v", o.lockTTL)
	}
	if err := g.CheckTTL(o.lockTTL); err != nil {
		return fmt.Errorf("--lock-ttl: %w", err)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"--acquire-timeout", o.acquireTimeout}, {"--node-timeout", o.nodeTimeout}, {"--shutdown-timeout", o.shutdownTimeout},
	} {
		if f.d <= 0 {
			return fmt.Errorf("%s must be positive, got %v", f.name, f.d)
		}
	}
	if g == inventory.GuardRedsync && !fs.Changed("node-timeout") {
		o.nodeTimeout = 0 // go-redis's own defaults, as redsync's users run it
	}
	if !o.faultHooks && (fs.Changed("fault-pause") || fs.Changed("fault-fraction") || o.faultSigstop) {
		return errors.New("--fault-pause, --fault-fraction and --fault-hooks-sigstop need --fault-hooks")
	}
	if fs.Changed("listen-fd") && (o.listenFD < 3 || fs.Changed("listen")) {
		return fmt.Errorf("--listen-fd %d: want an inherited descriptor (3 or more), and no --listen", o.listenFD)
	}
	if o.faultPause < 0 || o.faultPause > inventory.MaxPause {
		return fmt.Errorf("--fault-pause must be 0..%v, got %v", inventory.MaxPause, o.faultPause)
	}
	if !(o.faultFraction >= 0 && o.faultFraction <= 1) {
		return fmt.Errorf("--fault-fraction must be 0..1, got %v", o.faultFraction)
	}
	if (o.faultPause > 0) != (o.faultFraction > 0) {
		return errors.New("--fault-pause and --fault-fraction go together (a pause length and a share of requests)")
	}
	return nil
}

func (o *serveOptions) run(ctx context.Context, e *env) error {
	logger := slog.New(slog.NewTextHandler(e.stderr, nil))
	handlerOpts := []inventory.HandlerOption{inventory.WithLogger(logger)}
	rcfg := inventory.ReplicaConfig{
		StoreDSN: o.store, Guard: o.guard, Nodes: o.nodes, Etcd: o.etcd, NodeTimeout: o.nodeTimeout,
		LockTTL: o.lockTTL, AcquireTimeout: o.acquireTimeout, Holder: o.holder,
		Username: o.user, Password: o.password, TLS: o.tls, TLSFiles: o.tlsFlags.resolved,
	}
	var events *drill.EventWriter
	if o.drillEvents != "" {
		f, err := os.OpenFile(o.drillEvents, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("--drill-events: %w", err)
		}
		defer f.Close()
		holder := o.holder
		if holder == "" {
			holder = strconv.Itoa(os.Getpid())
		}
		events = drill.NewEventWriter(f, o.guard, holder)
		rcfg.OnHold = events.Hold
	}
	if o.faultHooks {
		faults := inventory.NewFaults()
		if err := faults.SetRandom(o.faultPause, o.faultFraction); err != nil {
			return err
		}
		if o.faultSigstop {
			notify := func(inventory.ProcessPause) {}
			if events != nil {
				notify = events.ProcessPause
			}
			faults.EnableProcessStop(notify)
		}
		rcfg.PauseHook = faults.Hook()
		handlerOpts = append(handlerOpts, inventory.WithFaults(faults))
	}
	// One registry for the service, its lock client and the runtime.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rcfg.Registerer = reg
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	replica, err := inventory.OpenReplica(octx, rcfg)
	cancel()
	if err != nil {
		return err
	}
	defer replica.Close()
	svc := replica.Service()
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	for i, err := range replica.PingNodes(pctx) {
		if err != nil {
			fmt.Fprintf(e.stderr, "redlab serve: node%d %s: no answer at start: %v\n", i+1, o.nodes[i], err)
		}
	}
	pcancel()

	h, err := inventory.NewHandler(svc, reg, handlerOpts...)
	if err != nil {
		return err
	}
	srv := inventory.NewServer(o.listen, h)
	ln, err := o.listener()
	if err != nil {
		return err
	}
	defer registerTarget(e, stateDir(""), lab.JobServe, ln.Addr().String())()
	hooks := ""
	if o.faultHooks {
		hooks = ", fault hooks ON"
	}
	if o.faultSigstop {
		hooks += ", PROCESS-STOPPING PAUSES ON (drills only)"
	}
	fmt.Fprintf(e.stdout, "redlab serve: listening on http://%s (guard %s, holder %s, store %s%s)\n",
		ln.Addr(), o.guard, svc.Holder(), inventory.RedactDSN(o.store), hooks)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-e.signals:
	case <-ctx.Done():
	}

	fmt.Fprintln(e.stderr, "redlab serve: draining: in-flight reservations finish and release their locks (signal again to exit now)")
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownTimeout)
	defer scancel()
	drained := make(chan error, 1)
	go func() { drained <- srv.Shutdown(sctx) }()
	select {
	case err := <-drained:
		<-served
		if err != nil {
			srv.Close()
			return fmt.Errorf("shutdown: %w (in-flight requests cut off)", err)
		}
		fmt.Fprintln(e.stderr, "redlab serve: stopped")
		if events != nil {
			return events.Err()
		}
		return nil
	case <-e.signals:
		srv.Close()
		scancel()
		<-drained
		<-served
		return errors.New("second signal: exited without waiting for in-flight requests")
	}
}

// listener is --listen, or the socket inherited as --listen-fd.
func (o *serveOptions) listener() (net.Listener, error) {
	if o.listenFD == 0 {
		ln, err := net.Listen("tcp", o.listen)
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		return ln, nil
	}
	f := os.NewFile(uintptr(o.listenFD), "listen-fd")
	defer f.Close() // FileListener holds a duplicate
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("--listen-fd %d: %w", o.listenFD, err)
	}
	return ln, nil
}

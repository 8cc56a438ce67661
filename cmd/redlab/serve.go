package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/redlock"
)

func init() {
	register(command{name: "serve", summary: "run the inventory reservation service (HTTP API)", run: runServe})
}

// serveOptions are the parsed flags of `redlab serve`.
type serveOptions struct {
	nodes           []string // empty for guards without a lock
	store           string
	guard           inventory.Guard
	listen          string
	lockTTL         time.Duration
	acquireTimeout  time.Duration
	nodeTimeout     time.Duration
	shutdownTimeout time.Duration
	holder          string
	faultHooks      bool
	faultPause      time.Duration
	faultFraction   float64
}

const serveUsage = `usage: redlab serve [--nodes ADDR[,ADDR...]] [--store sqlite:PATH|postgres://...]
                   [--guard NAME] [--listen HOST:PORT] [--lock-ttl 10s] [--fault-hooks]

Runs the inventory reservation service: POST /v1/reservations, GET|PUT
/v1/stock/{sku}, /healthz, /readyz, /metrics (see inventory/openapi.yaml).
--nodes (or $REDLAB_NODES) is needed by the guards that lock: redis-single
(uses the first node), redlock and redlock-fenced.

The first SIGINT/SIGTERM drains: no new connections, in-flight reservations
finish and release their locks. A second one exits at once.
Exit 0 after a clean drain, 1 on failure, 2 on a usage error.

flags:`

func parseServe(e *env, args []string) (serveOptions, error) {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var (
		nodes nodesFlag
		guard string
		o     serveOptions
	)
	fs.Var(&nodes, "nodes", "Redis nodes of the lock, host:port[,host:port...] (default $REDLAB_NODES)")
	fs.StringVar(&o.store, "store", "sqlite:.redlab/inventory.db", "inventory database: sqlite:PATH or postgres://...")
	fs.StringVar(&guard, "guard", string(inventory.GuardRedlock), "how reservations are protected: none, redis-single, redlock, redlock-fenced, db-atomic")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "HTTP listen address, host:port (port 0 picks a free one)")
	fs.DurationVar(&o.lockTTL, "lock-ttl", inventory.DefaultLockTTL, "lock time to live")
	fs.DurationVar(&o.acquireTimeout, "acquire-timeout", inventory.DefaultAcquireTimeout, "how long a reservation waits for its lock before answering 503 contended")
	fs.DurationVar(&o.nodeTimeout, "node-timeout", redlock.DefaultNodeTimeout, "per-node dial/read/write timeout of the lock client")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 60*time.Second, "how long the first signal waits for in-flight requests")
	fs.StringVar(&o.holder, "holder", "", "this replica's name in the ledger (default host-pid-random)")
	fs.BoolVar(&o.faultHooks, "fault-hooks", false, "enable fault injection: POST /v1/faults/pause and the --fault-pause flags")
	fs.DurationVar(&o.faultPause, "fault-pause", 0, "with --fault-hooks: pause this long inside the critical section of --fault-fraction of the reservations")
	fs.Float64Var(&o.faultFraction, "fault-fraction", 0, "with --fault-pause: the share of reservations to pause, 0..1")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, serveUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	g, err := inventory.ParseGuard(guard)
	if err != nil {
		return o, err
	}
	o.guard = g
	if g.NeedsNodes() {
		if o.nodes, err = nodes.orEnv(); err != nil {
			return o, fmt.Errorf("guard %s: %w", g, err)
		}
	}
	if err := inventory.CheckDSN(o.store); err != nil {
		return o, fmt.Errorf("--store: %w", err)
	}
	_, port, err := net.SplitHostPort(o.listen) // an empty host is every interface
	if err != nil {
		return o, fmt.Errorf("--listen %q: want host:port: %w", o.listen, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return o, fmt.Errorf("--listen %q: port must be 0-65535", o.listen)
	}
	if o.lockTTL < time.Millisecond {
		return o, fmt.Errorf("--lock-ttl must be at least 1ms, got %v", o.lockTTL)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"--acquire-timeout", o.acquireTimeout}, {"--node-timeout", o.nodeTimeout}, {"--shutdown-timeout", o.shutdownTimeout},
	} {
		if f.d <= 0 {
			return o, fmt.Errorf("%s must be positive, got %v", f.name, f.d)
		}
	}
	if !o.faultHooks && (fs.Changed("fault-pause") || fs.Changed("fault-fraction")) {
		return o, errors.New("--fault-pause and --fault-fraction need --fault-hooks")
	}
	if o.faultPause < 0 || o.faultPause > inventory.MaxPause {
		return o, fmt.Errorf("--fault-pause must be 0..%v, got %v", inventory.MaxPause, o.faultPause)
	}
	if !(o.faultFraction >= 0 && o.faultFraction <= 1) {
		return o, fmt.Errorf("--fault-fraction must be 0..1, got %v", o.faultFraction)
	}
	if (o.faultPause > 0) != (o.faultFraction > 0) {
		return o, errors.New("--fault-pause and --fault-fraction go together (a pause length and a share of requests)")
	}
	return o, nil
}

func runServe(ctx context.Context, e *env, args []string) int {
	o, err := parseServe(e, args)
	if errors.Is(err, pflag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab serve: %v\n", err)
		return exitUsage
	}
	fail := func(format string, args ...any) int {
		fmt.Fprintf(e.stderr, "redlab serve: "+format+"\n", args...)
		return exitFailure
	}

	logger := slog.New(slog.NewTextHandler(e.stderr, nil))
	handlerOpts := []inventory.HandlerOption{inventory.WithLogger(logger)}
	rcfg := inventory.ReplicaConfig{
		StoreDSN: o.store, Guard: o.guard, Nodes: o.nodes, NodeTimeout: o.nodeTimeout,
		LockTTL: o.lockTTL, AcquireTimeout: o.acquireTimeout, Holder: o.holder,
	}
	if o.faultHooks {
		faults := inventory.NewFaults()
		if err := faults.SetRandom(o.faultPause, o.faultFraction); err != nil {
			return fail("%v", err)
		}
		rcfg.PauseHook = faults.Hook()
		handlerOpts = append(handlerOpts, inventory.WithFaults(faults))
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	replica, err := inventory.OpenReplica(octx, rcfg)
	cancel()
	if err != nil {
		return fail("%v", err)
	}
	defer replica.Close()
	svc := replica.Service()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv := inventory.NewServer(o.listen, inventory.NewHandler(svc, reg, handlerOpts...))
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fail("listen: %v", err)
	}
	hooks := ""
	if o.faultHooks {
		hooks = ", fault hooks ON"
	}
	fmt.Fprintf(e.stdout, "redlab serve: listening on http://%s (guard %s, holder %s, store %s%s)\n",
		ln.Addr(), o.guard, svc.Holder(), inventory.RedactDSN(o.store), hooks)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fail("serve: %v", err)
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
			return fail("shutdown: %v (in-flight requests cut off)", err)
		}
		fmt.Fprintln(e.stderr, "redlab serve: stopped")
		return exitOK
	case <-e.signals:
		srv.Close()
		scancel()
		<-drained
		<-served
		return fail("second signal: exiting without waiting for in-flight requests")
	}
}

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
)

// loadFlags are the flags `load` and `sweep` share: what to load and how.
type loadFlags struct {
	nodes          nodesFlag
	tls            tlsFlags
	etcd           etcdFlag
	guard          string
	keys           keysFlag
	quantity       quantityFlag
	stock          int64
	replicas       int
	target         targetFlag
	store          string
	maxInFlight    int
	lockTTL        time.Duration
	acquireTimeout time.Duration
	nodeTimeout    time.Duration
	hold           holdFlag
	login          login
	lockConc       int
	overloadCtl    bool
	lateTolerance  time.Duration
	interval       time.Duration
	progress       bool
	metricsAddr    string
	worker         workerFlag
	seed           uint64
	out            string
	cpuProfile     string
	labCPU         bool

	// resolved by validate
	addrs          []string
	tlsCfg         *tls.Config // nil for plain nodes
	etcdURLs       []string
	g              inventory.Guard
	user, password string
}

func (f *loadFlags) register(fs *pflag.FlagSet, outDefault string) {
	f.keys = keysFlag{Kind: "uniform", N: 1000}
	f.quantity = quantityFlag{Min: 1, Max: 1}
	f.worker = workerFlag{Index: 0, Count: 1}
	fs.Var(&f.nodes, "nodes", "lock nodes (default $"+envNodes+"); not needed with --target or the guards without a Redis lock (none, db-*, etcd*)"+nodesUsage)
	f.tls.register(fs)
	fs.Var(&f.etcd, "etcd", "etcd client URLs of the guards etcd and etcd-fenced (default $"+envEtcd+")")
	fs.StringVar(&f.guard, "guard", string(inventory.GuardRedlock), "how reservations are protected: "+inventory.JoinGuards(inventory.Guards())+"; or "+inventory.JoinGuards(inventory.Comparisons())+" (release by plain DEL: the mistake, for comparisons only)")
	fs.Var(&f.keys, "keys", "SKU distribution: uniform:N, zipf:N:θ (θ<1 YCSB-style), hot:N:fraction[:hotkeys]")
	fs.Var(&f.quantity, "quantity", "units per reservation: N, const:N or uniform:MIN:MAX")
	fs.Int64Var(&f.stock, "stock", 1_000_000, "stock seeded for every SKU before the run")
	fs.IntVar(&f.replicas, "replicas", 2, "in-process inventory replicas, each with its own Redlock client and pools")
	fs.Var(&f.target, "target", "send to remote inventory instances (http://a:8080,http://b:8080) or to nothing (noop) instead of in-process replicas")
	fs.StringVar(&f.store, "store", "", "inventory store DSN, sqlite:PATH or postgres://... (default sqlite in the out dir, syncing at checkpoints rather than every commit; with --target: the instances' store, to audit it)")
	fs.IntVar(&f.maxInFlight, "max-in-flight", loadgen.DefaultMaxInFlight, "bound on concurrent operations; an operation with no free slot within --late-tolerance is counted late, not sent")
	fs.DurationVar(&f.lockTTL, "lock-ttl", inventory.DefaultLockTTL, "lock TTL of the in-process replicas")
	fs.DurationVar(&f.acquireTimeout, "acquire-timeout", inventory.DefaultAcquireTimeout, "how long a reservation waits for its lock before it counts as contended")
	fs.DurationVar(&f.nodeTimeout, "node-timeout", 0, "per-node dial/read/write timeout of the lock clients (default: the redlock default, 50ms; for redsync, go-redis's own defaults)")
	fs.Var(&f.hold, "hold", "time each reservation spends inside its critical section, after the read: D or uniform:MIN:MAX (default 0); a hold is what lets a second grant overlap a first")
	f.login.register(fs, node.UserRedlock)
	fs.IntVar(&f.lockConc, "lock-concurrency", 0, "fixed bound on the concurrent acquire attempts of each replica's Redlock client, instead of its adaptive limit; excess attempts wait for a slot before their node timeout starts (default: the adaptive limit)")
	fs.BoolVar(&f.overloadCtl, "overload-control", true, "the Redlock clients' overload control: an adaptive limit on acquire attempts in flight (the excess waits in line, and fails as overloaded only when no place comes before its deadline) and a retry budget; =false to measure without")
	fs.DurationVar(&f.lateTolerance, "late-tolerance", loadgen.DefaultLateTolerance, "how late after its intended start an operation may be sent before it counts as late")
	fs.DurationVar(&f.interval, "interval", loadgen.DefaultInterval, "collection interval of histograms, counters and the status line")
	fs.BoolVar(&f.progress, "progress", false, "print the status line every interval even when stderr is not a terminal")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve the generator's own Prometheus metrics on this address (e.g. :9101)")
	fs.Var(&f.worker, "worker", "this machine's share of a run split over M load machines: i/M (rate and keys are sharded)")
	fs.Uint64Var(&f.seed, "seed", 0, "seed of the key and quantity draws (default: random, recorded in run.json)")
	fs.StringVar(&f.out, "out", outDefault, "run directory for the outputs; an earlier run of the same kind there is replaced")
	fs.BoolVar(&f.labCPU, "lab-cpu", false, "account the CPU time of the lab's node processes (redis-server, and the supervisor with its front; etcd members and theirs) in every run, read from /proc: the lab of $"+envStateDir+", else ./"+lab.DefaultStateDir)
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (go tool pprof) to FILE, from the end of the set-up to the end of the runs")
}

// validate checks the shared flags and the run's thresholds (given as
// thFlag); it has no side effects.
func (f *loadFlags) validate(fs *pflag.FlagSet, thFlag string, ths thresholdsFlag) error {
	// The load generator also runs the comparison guards (redlock-del):
	// a run that shows a mistake next to the right practice.
	g, err := inventory.ParseAnyGuard(f.guard)
	if err != nil {
		return err
	}
	f.g = g
	remote := len(f.target) > 0
	if remote && fs.Changed("guard") {
		return errors.New("--guard applies to in-process replicas; a --target runs the guard its instances were started with")
	}
	if remote && fs.Changed("replicas") {
		return errors.New("--replicas applies to in-process replicas, not to --target")
	}
	if remote && fs.Changed("lock-concurrency") {
		return errors.New("--lock-concurrency applies to in-process replicas, not to --target")
	}
	if remote && fs.Changed("overload-control") {
		return errors.New("--overload-control applies to in-process replicas, not to --target")
	}
	if remote && fs.Changed("hold") {
		return errors.New("--hold applies to in-process replicas, not to --target")
	}
	needsNodes := !remote && g.NeedsNodes()
	if needsNodes || len(f.nodes.Addrs) > 0 {
		nodes, err := f.nodes.orEnv()
		if err != nil && needsNodes {
			return fmt.Errorf("%w (guard %s takes a lock)", err, g)
		}
		if err == nil {
			if f.tlsCfg, err = f.tls.config(nodes); err != nil {
				return err
			}
			f.addrs = nodes.Addrs
		}
	}
	if needsNodes {
		if f.user, f.password, err = f.login.resolve(); err != nil {
			return err
		}
	}
	if !remote && g.NeedsEtcd() {
		if f.etcdURLs, err = f.etcd.orEnv(); err != nil {
			return fmt.Errorf("%w (guard %s takes its lock on etcd)", err, g)
		}
		if err := g.CheckTTL(f.lockTTL); err != nil {
			return fmt.Errorf("--lock-ttl: %w", err)
		}
	}
	if f.replicas < 1 || f.replicas > 64 {
		return fmt.Errorf("--replicas must be 1..64, got %d", f.replicas)
	}
	if f.stock < 0 || f.stock > inventory.MaxStock {
		return fmt.Errorf("--stock must be 0..%d, got %d", int64(inventory.MaxStock), f.stock)
	}
	if f.quantity.Max > inventory.MaxQuantity {
		return fmt.Errorf("--quantity must stay within 1..%d", inventory.MaxQuantity)
	}
	if f.maxInFlight < 1 || f.maxInFlight > 1_000_000 {
		return fmt.Errorf("--max-in-flight must be 1..1000000, got %d", f.maxInFlight)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--lock-ttl", f.lockTTL}, {"--acquire-timeout", f.acquireTimeout}, {"--late-tolerance", f.lateTolerance}} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive, got %v", d.name, d.v)
		}
	}
	if f.nodeTimeout < 0 {
		return fmt.Errorf("--node-timeout must not be negative, got %v", f.nodeTimeout)
	}
	if f.lockConc < 0 {
		return fmt.Errorf("--lock-concurrency must not be negative, got %d", f.lockConc)
	}
	if f.interval < 100*time.Millisecond {
		return fmt.Errorf("--interval must be at least 100ms, got %v", f.interval)
	}
	if f.store != "" {
		if err := inventory.CheckDSN(f.store); err != nil {
			return err
		}
	}
	if f.out == "" {
		return errors.New("--out must name a directory")
	}
	if _, err := loadgen.NewKeyGen(loadgen.KeySpec(f.keys), loadgen.Shard(f.worker)); err != nil {
		return err
	}
	n, why := f.timedNodes()
	if err := ths.checkNodes(thFlag, n, why); err != nil {
		return err
	}
	if !fs.Changed("seed") {
		f.seed = rand.Uint64()
	}
	return nil
}

// timedNodes is how many lock nodes the run times one by one (node1…nodeN
// in thresholds), and why there are none when it is 0: only the
// in-process Redlock guards see each node's reply.
func (f *loadFlags) timedNodes() (int, string) {
	switch {
	case f.targetKind() == "noop":
		return 0, "--target noop takes no lock, so there is no per-node latency"
	case f.targetKind() == "http":
		return 0, "the --target instances take the locks, so this run sees no per-node latency"
	case !f.g.TimesNodes():
		return 0, fmt.Sprintf("guard %s has no per-node latency (redlock, redlock-fenced and redlock-del have)", f.g)
	}
	return len(f.addrs), ""
}

// targetKind names the target in run.json.
func (f *loadFlags) targetKind() string {
	switch {
	case len(f.target) == 1 && f.target[0] == "noop":
		return "noop"
	case len(f.target) > 0:
		return "http"
	}
	return "inventory"
}

// scratchStorePragmas tune the run directory's own SQLite store: a scratch
// store, written by this process alone and audited by it before it exits.
// WAL with synchronous=NORMAL keeps every transaction atomic and the file
// consistent, and syncs at checkpoints instead of at every commit: a power
// cut can lose the last transactions, which a run does not survive anyway,
// and an fsync per reservation cost the load generator more CPU than the
// whole lock. A --store of the user's keeps the store's own defaults.
const scratchStorePragmas = "_pragma=synchronous(NORMAL)"

// newTarget builds the target the flags describe, with its store in dir
// unless --store names one; in-process replicas register their service and
// lock metrics on reg when it is not nil.
func (f *loadFlags) newTarget(ctx context.Context, dir string, rec *loadgen.Recorder, reg prometheus.Registerer) (loadgen.Target, error) {
	switch f.targetKind() {
	case "noop":
		return loadgen.NoopTarget{}, nil
	case "http":
		return loadgen.NewHTTPTarget(ctx, loadgen.HTTPConfig{URLs: f.target, StoreDSN: f.store, MaxConns: f.maxInFlight})
	}
	dsn := f.store
	if dsn == "" {
		dsn = "sqlite:" + filepath.Join(dir, "inventory.db") + "?" + scratchStorePragmas
	}
	return loadgen.NewInventoryTarget(ctx, loadgen.InventoryConfig{
		ReplicaConfig: inventory.ReplicaConfig{
			Nodes: f.addrs, Etcd: f.etcdURLs, Guard: f.g, StoreDSN: dsn,
			LockTTL: f.lockTTL, AcquireTimeout: f.acquireTimeout, NodeTimeout: f.nodeTimeout,
			MaxConcurrentAttempts: f.lockConc, NoOverloadControl: !f.overloadCtl, Registerer: reg,
			Username: f.user, Password: f.password, TLS: f.tlsCfg, TLSFiles: f.tls.resolved,
		},
		Replicas: f.replicas, Recorder: rec, Hold: loadgen.HoldSpec(f.hold),
		RunID: fmt.Sprintf("load-%s-w%d-%08x", time.Now().UTC().Format("20060102T150405"), f.worker.Index, rand.Uint32()),
	})
}

// meta describes the run for run.json.
func (f *loadFlags) meta(stages []loadgen.Stage, args []string, target loadgen.Target) loadgen.Meta {
	m := loadgen.Meta{
		Command: strings.Join(args, " "), Target: f.targetKind(), Stages: loadgen.FormatStages(stages),
		Keys: loadgen.KeySpec(f.keys).String(), Quantity: loadgen.QuantitySpec(f.quantity).String(),
		Worker: loadgen.Shard(f.worker).String(),
	}
	switch m.Target {
	case "inventory":
		m.Guard, m.Nodes, m.Etcd, m.Replicas = string(f.g), f.addrs, f.etcdURLs, f.replicas
		m.LockTTLMs = float64(f.lockTTL) / 1e6
		m.Store = "sqlite:inventory.db (in the run directory)"
		if f.store != "" {
			m.Store = inventory.RedactDSN(f.store)
		}
	case "http":
		m.URLs = f.target
		if h, ok := target.(*loadgen.HTTPTarget); ok {
			m.Guard = h.Guard()
		}
		if f.store != "" {
			m.Store = inventory.RedactDSN(f.store)
		}
	}
	return m
}

// status returns where the live status line goes: stderr when it is a
// terminal, or with --progress; nil otherwise.
func (f *loadFlags) status(w io.Writer) (io.Writer, bool) {
	tty := false
	if file, ok := w.(*os.File); ok {
		tty = isatty.IsTerminal(file.Fd())
	}
	if tty || f.progress {
		return w, tty
	}
	return nil, false
}

// loadRig is what load and sweep set up once before their runs: the out
// directory, this worker's shard and keys, the target with its recorder,
// the generator's metrics endpoint and the status line.
type loadRig struct {
	shard   loadgen.Shard
	keys    *loadgen.KeyGen
	rec     *loadgen.Recorder
	target  loadgen.Target
	metrics *loadgen.Metrics
	status  io.Writer
	tty     bool
	watch   []loadgen.WatchedProcess
	close   func()
}

// setUp readies the out directory (an earlier run of the same kind there is
// replaced) and builds the rig. On success the caller must call rig.close.
func (f *loadFlags) setUp(ctx context.Context, e *env, sweep bool) (*loadRig, error) {
	if err := loadgen.PrepareDir(f.out, sweep); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return nil, err
	}
	r := &loadRig{shard: loadgen.Shard(f.worker)}
	if w := restartDelayWarning(f.lockTTL); w != "" {
		fmt.Fprintln(e.stderr, w)
	}
	var err error
	if r.keys, err = loadgen.NewKeyGen(loadgen.KeySpec(f.keys), r.shard); err != nil {
		return nil, err
	}
	if f.labCPU {
		if r.watch, err = labProcesses(ctx, stateDir("")); err != nil {
			return nil, err
		}
	}
	r.rec = loadgen.NewRecorder(len(f.addrs), 0)
	addrs := f.addrs
	r.rec.OnFirstNodeError(func(i int, err error) {
		fmt.Fprintf(e.stderr, "%s %s: first error: %v\n", loadgen.NodeTag(i), addrs[i], err)
	})
	var reg prometheus.Registerer
	if f.metricsAddr != "" {
		r.metrics = loadgen.NewMetrics()
		reg = r.metrics.Registry()
	}
	if r.target, err = f.newTarget(ctx, f.out, r.rec, reg); err != nil {
		return nil, err
	}
	stopMetrics, err := f.serveMetrics(ctx, e, r.metrics)
	if err != nil {
		r.target.Close()
		return nil, err
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		stopMetrics()
		r.target.Close()
		return nil, err
	}
	r.close = func() {
		stopProfile()
		stopMetrics()
		r.target.Close()
	}
	r.status, r.tty = f.status(e.stderr)
	return r, nil
}

// labProcesses lists the processes of the lab in dir whose CPU --lab-cpu
// accounts (lab.Processes).
func labProcesses(ctx context.Context, dir string) ([]loadgen.WatchedProcess, error) {
	l, err := lab.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("--lab-cpu: %w", err)
	}
	ps, err := l.Processes(ctx)
	if err != nil {
		return nil, fmt.Errorf("--lab-cpu: %w", err)
	}
	out := make([]loadgen.WatchedProcess, len(ps))
	for i, p := range ps {
		out[i] = loadgen.WatchedProcess{Name: p.Name, PID: p.PID}
	}
	return out, nil
}

// startCPUProfile profiles this process into path until the returned
// function is called; an empty path profiles nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	file, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(file); err != nil {
		file.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		file.Close()
	}, nil
}

// serveMetrics serves m (nil: no --metrics-addr) and, when the lab in the
// state directory has monitoring on, registers the endpoint with its
// Prometheus until stop.
func (f *loadFlags) serveMetrics(ctx context.Context, e *env, m *loadgen.Metrics) (stop func(), err error) {
	if m == nil {
		return func() {}, nil
	}
	bound, stopServe, err := m.Serve(ctx, f.metricsAddr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(e.stderr, "generator metrics on http://%s/metrics\n", bound)
	unregister := registerTarget(e, stateDir(""), lab.JobLoad, bound)
	return func() {
		unregister()
		stopServe()
	}, nil
}

// runSpec is one run of sched (the profile's schedule) into dir on the rig,
// judged against thresholds; command is the argv recorded in run.json.
func (f *loadFlags) runSpec(r *loadRig, dir string, profile []loadgen.Stage, sched *loadgen.Schedule, command []string, thresholds []loadgen.Threshold, stop <-chan struct{}) loadgen.RunSpec {
	return loadgen.RunSpec{
		Out: dir, Meta: f.meta(profile, command, r.target), Stock: f.stock,
		Engine: loadgen.Config{
			Schedule: sched, Target: r.target, Keys: r.keys, Quantity: loadgen.QuantitySpec(f.quantity), Seed: f.seed,
			MaxInFlight: f.maxInFlight, LateTolerance: f.lateTolerance, Interval: f.interval, Recorder: r.rec, Watch: r.watch,
		},
		Status: r.status, StatusTTY: r.tty, Metrics: r.metrics, Thresholds: thresholds, Stop: stop,
		FaultLog: f.labFaultLog(),
	}
}

// labFaultLog is the fault log of the lab the run loads (the lab of the
// state directory, when the run's lock nodes or etcd endpoints are its),
// so that the report shades the faults injected during the run; "" for
// any other target.
func (f *loadFlags) labFaultLog() string {
	dir := stateDir("")
	l, err := lab.Open(dir)
	if err != nil {
		return ""
	}
	ours := append(l.Addrs(), l.EtcdEndpoints()...)
	for _, a := range append(slices.Clone(f.addrs), f.etcdURLs...) {
		if slices.Contains(ours, a) {
			return filepath.Join(dir, lab.FaultsFile)
		}
	}
	return ""
}

// report prints a run's text summary and its verdict: a threshold error
// (exit 99) naming each failed threshold when any failed. load, merge and
// report end with it.
func report(e *env, r *loadgen.Report, failed []loadgen.ThresholdResult) error {
	if err := r.WriteText(e.stdout); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "report: %s\n", filepath.Join(r.Dir, loadgen.HTMLFile))
	if len(failed) == 0 {
		return nil
	}
	for _, f := range failed {
		fmt.Fprintf(e.stderr, "threshold failed: %s (got %s)\n", f.Expr, f.Got)
	}
	return thresholdErrorf("%s failed", countOf(len(failed), "threshold"))
}

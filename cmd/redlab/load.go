package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
)

func init() {
	register(command{name: "load", summary: "open-loop load against the inventory service: HDR latency, safety, reports", run: runLoad})
}

// rateFlag is --rate: "500" or "500/1s".
type rateFlag struct{ v float64 }

func (f *rateFlag) String() string { return strconv.FormatFloat(f.v, 'f', -1, 64) }
func (f *rateFlag) Type() string   { return "N[/PERIOD]" }
func (f *rateFlag) Set(s string) error {
	r, err := loadgen.ParseRate(s)
	if err != nil {
		return err
	}
	f.v = r
	return nil
}

// stagesFlag is --stages: "30s:500,60s:2000,30s:0".
type stagesFlag []loadgen.Stage

func (f *stagesFlag) String() string { return loadgen.FormatStages(*f) }
func (f *stagesFlag) Type() string   { return "DUR:RATE,..." }
func (f *stagesFlag) Set(s string) error {
	st, err := loadgen.ParseStages(s)
	if err != nil {
		return err
	}
	*f = st
	return nil
}

// keysFlag is --keys: uniform:N, zipf:N:θ, hot:N:fraction[:hotkeys].
type keysFlag loadgen.KeySpec

func (f *keysFlag) String() string { return loadgen.KeySpec(*f).String() }
func (f *keysFlag) Type() string   { return "SPEC" }
func (f *keysFlag) Set(s string) error {
	k, err := loadgen.ParseKeys(s)
	if err != nil {
		return err
	}
	*f = keysFlag(k)
	return nil
}

// quantityFlag is --quantity: N, const:N or uniform:MIN:MAX.
type quantityFlag loadgen.QuantitySpec

func (f *quantityFlag) String() string { return loadgen.QuantitySpec(*f).String() }
func (f *quantityFlag) Type() string   { return "SPEC" }
func (f *quantityFlag) Set(s string) error {
	q, err := loadgen.ParseQuantity(s)
	if err != nil {
		return err
	}
	*f = quantityFlag(q)
	return nil
}

// thresholdsFlag is a repeatable --threshold (or --slo).
type thresholdsFlag []loadgen.Threshold

func (f *thresholdsFlag) String() string {
	parts := make([]string, len(*f))
	for i, t := range *f {
		parts[i] = t.Expr
	}
	return strings.Join(parts, " ")
}
func (f *thresholdsFlag) Type() string { return "EXPR" }
func (f *thresholdsFlag) Set(s string) error {
	t, err := loadgen.ParseThreshold(s)
	if err != nil {
		return err
	}
	*f = append(*f, t)
	return nil
}

// workerFlag is --worker i/M.
type workerFlag loadgen.Shard

func (f *workerFlag) String() string { return loadgen.Shard(*f).String() }
func (f *workerFlag) Type() string   { return "i/M" }
func (f *workerFlag) Set(s string) error {
	sh, err := loadgen.ParseShard(s)
	if err != nil {
		return err
	}
	*f = workerFlag(sh)
	return nil
}

// targetFlag is --target: "noop" or http(s) base URLs.
type targetFlag []string

func (f *targetFlag) String() string { return strings.Join(*f, ",") }
func (f *targetFlag) Type() string   { return "noop|URL[,URL...]" }
func (f *targetFlag) Set(s string) error {
	if strings.TrimSpace(s) == "noop" {
		*f = []string{"noop"}
		return nil
	}
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("target %q: want noop or http(s)://host:port", u)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return fmt.Errorf("no target in %q", s)
	}
	*f = out
	return nil
}

// loadFlags are the flags `load` and `sweep` share: what to load and how.
type loadFlags struct {
	nodes          nodesFlag
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
	lockConc       int
	lateTolerance  time.Duration
	interval       time.Duration
	progress       bool
	metricsAddr    string
	worker         workerFlag
	seed           uint64
	out            string

	// resolved by validate
	addrs []string
	g     inventory.Guard
}

func (f *loadFlags) register(fs *pflag.FlagSet, outDefault string) {
	f.keys = keysFlag{Kind: "uniform", N: 1000}
	f.quantity = quantityFlag{Min: 1, Max: 1}
	f.worker = workerFlag{Index: 0, Count: 1}
	fs.Var(&f.nodes, "nodes", "lock nodes host:port[,host:port...] (default $REDLAB_NODES); not needed with --target or guards none/db-atomic")
	fs.StringVar(&f.guard, "guard", string(inventory.GuardRedlock), "how reservations are protected: none, redis-single, redlock, redlock-fenced, db-atomic")
	fs.Var(&f.keys, "keys", "SKU distribution: uniform:N, zipf:N:θ (θ<1 YCSB-style), hot:N:fraction[:hotkeys]")
	fs.Var(&f.quantity, "quantity", "units per reservation: N, const:N or uniform:MIN:MAX")
	fs.Int64Var(&f.stock, "stock", 1_000_000, "stock seeded for every SKU before the run")
	fs.IntVar(&f.replicas, "replicas", 2, "in-process inventory replicas, each with its own Redlock client and pools")
	fs.Var(&f.target, "target", "send to remote inventory instances (http://a:8080,http://b:8080) or to nothing (noop) instead of in-process replicas")
	fs.StringVar(&f.store, "store", "", "inventory store DSN, sqlite:PATH or postgres://... (default sqlite in the out dir; with --target: the instances' store, to audit it)")
	fs.IntVar(&f.maxInFlight, "max-in-flight", loadgen.DefaultMaxInFlight, "bound on concurrent operations; an operation with no free slot within --late-tolerance is counted late, not sent")
	fs.DurationVar(&f.lockTTL, "lock-ttl", inventory.DefaultLockTTL, "lock TTL of the in-process replicas")
	fs.DurationVar(&f.acquireTimeout, "acquire-timeout", inventory.DefaultAcquireTimeout, "how long a reservation waits for its lock before it counts as contended")
	fs.DurationVar(&f.nodeTimeout, "node-timeout", 0, "per-node dial/read/write timeout of the lock clients (default: the redlock default, 50ms)")
	fs.IntVar(&f.lockConc, "lock-concurrency", 0, "bound on the concurrent acquire attempts of each replica's Redlock client; excess attempts wait for a slot before their node timeout starts (0: unlimited)")
	fs.DurationVar(&f.lateTolerance, "late-tolerance", loadgen.DefaultLateTolerance, "how late after its intended start an operation may be sent before it counts as late")
	fs.DurationVar(&f.interval, "interval", loadgen.DefaultInterval, "collection interval of histograms, counters and the status line")
	fs.BoolVar(&f.progress, "progress", false, "print the status line every interval even when stderr is not a terminal")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve the generator's own Prometheus metrics on this address (e.g. :9101)")
	fs.Var(&f.worker, "worker", "this machine's share of a run split over M load machines: i/M (rate and keys are sharded)")
	fs.Uint64Var(&f.seed, "seed", 0, "seed of the key and quantity draws (default: random, recorded in run.json)")
	fs.StringVar(&f.out, "out", outDefault, "run directory for the outputs; must not hold a run already")
}

// validate checks the shared flags; it has no side effects.
func (f *loadFlags) validate(fs *pflag.FlagSet) error {
	g, err := inventory.ParseGuard(f.guard)
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
	needsNodes := !remote && g != inventory.GuardNone && g != inventory.GuardDBAtomic
	if needsNodes || len(f.nodes) > 0 {
		if f.addrs, err = f.nodes.orEnv(); err != nil && needsNodes {
			return fmt.Errorf("%w (guard %s takes a lock)", err, g)
		}
		err = nil
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
	for name, d := range map[string]time.Duration{"--lock-ttl": f.lockTTL, "--acquire-timeout": f.acquireTimeout, "--late-tolerance": f.lateTolerance} {
		if d <= 0 {
			return fmt.Errorf("%s must be positive, got %v", name, d)
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
	if _, err := loadgen.KeySpec(f.keys).Generator(loadgen.Shard(f.worker)); err != nil {
		return err
	}
	if !fs.Changed("seed") {
		f.seed = rand.Uint64()
	}
	return nil
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

// newTarget builds the target the flags describe, with its store in dir
// unless --store names one.
func (f *loadFlags) newTarget(ctx context.Context, dir string, rec *loadgen.Recorder) (loadgen.Target, error) {
	switch f.targetKind() {
	case "noop":
		return loadgen.NoopTarget{}, nil
	case "http":
		return loadgen.NewHTTPTarget(ctx, loadgen.HTTPConfig{URLs: f.target, StoreDSN: f.store, MaxConns: f.maxInFlight})
	}
	dsn := f.store
	if dsn == "" {
		dsn = "sqlite:" + filepath.Join(dir, "inventory.db")
	}
	return loadgen.NewInventoryTarget(ctx, loadgen.InventoryConfig{
		Nodes: f.addrs, Guard: f.g, Replicas: f.replicas, StoreDSN: dsn,
		LockTTL: f.lockTTL, AcquireTimeout: f.acquireTimeout, NodeTimeout: f.nodeTimeout,
		LockConcurrency: f.lockConc, Recorder: rec,
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
		m.Guard, m.Nodes, m.Replicas = string(f.g), f.addrs, f.replicas
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

// checkOut refuses an out directory that already holds a run.
func checkOut(dir string) error {
	for _, name := range []string{loadgen.MetaFile, loadgen.SweepFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return fmt.Errorf("%s already holds a run; choose a new --out", dir)
		}
	}
	return nil
}

// loadOptions are the parsed flags of `redlab load`.
type loadOptions struct {
	loadFlags
	rate       rateFlag
	stages     stagesFlag
	duration   time.Duration
	thresholds thresholdsFlag
	profile    []loadgen.Stage
	args       []string
}

func parseLoad(e *env, args []string) (*loadOptions, error) {
	fs := pflag.NewFlagSet("load", pflag.ContinueOnError)
	fs.SetOutput(e.stderr)
	o := &loadOptions{args: args}
	o.register(fs, filepath.Join("runs", "load-"+time.Now().Format("20060102-150405")))
	fs.Var(&o.rate, "rate", "operations per second (500) or per period (50/100ms), with --duration")
	fs.DurationVar(&o.duration, "duration", 0, "how long --rate runs")
	fs.Var(&o.stages, "stages", "ramp profile instead of --rate/--duration: 30s:500,60s:2000,30s:0 (each stage ramps linearly from the previous rate)")
	fs.Var(&o.thresholds, "threshold", "pass/fail condition, repeatable: 'acquire.p99<20ms', 'safety.lost_updates==0', 'outcomes.error<1%', 'throughput>=500'")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: redlab load --nodes ADDR,... --guard NAME --rate N --duration D --keys SPEC --out DIR [flags]")
		fmt.Fprintln(e.stderr, "\nRuns an open-loop schedule of reservations and writes summary.json, latency.hlog, *.hgrm and report.html to --out.")
		fmt.Fprintln(e.stderr, "Latency is measured from each operation's intended start. First interrupt: stop, drain, report; second: abort.")
		fmt.Fprintln(e.stderr, "Exit 0 ok, 1 failure, 2 usage error, 99 a threshold failed.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case len(o.stages) > 0 && (fs.Changed("rate") || fs.Changed("duration")):
		return nil, errors.New("give either --stages or --rate with --duration, not both")
	case len(o.stages) > 0:
		o.profile = o.stages
	case !fs.Changed("rate") || o.duration <= 0:
		return nil, errors.New("--rate and a positive --duration are required (or --stages)")
	case o.rate.v <= 0:
		return nil, fmt.Errorf("--rate must be positive, got %v", o.rate.v)
	default:
		o.profile = []loadgen.Stage{{Duration: o.duration, Rate: o.rate.v}}
	}
	if err := o.validate(fs); err != nil {
		return nil, err
	}
	return o, nil
}

func runLoad(ctx context.Context, e *env, args []string) int {
	o, err := parseLoad(e, args)
	return startLoad(ctx, e, "load", err, func(ctx context.Context, stop <-chan struct{}) int {
		return o.run(ctx, e, stop)
	})
}

func (o *loadOptions) run(ctx context.Context, e *env, stop <-chan struct{}) int {
	fail := func(err error) int {
		fmt.Fprintf(e.stderr, "redlab load: %v\n", err)
		return exitFailure
	}
	sched, err := loadgen.NewSchedule(o.profile, loadgen.Shard(o.worker))
	if err != nil {
		return fail(err)
	}
	rig, err := o.setUp(ctx, e)
	if err != nil {
		return fail(err)
	}
	defer rig.close()
	if _, ok := rig.target.(loadgen.Preparer); ok && rig.status != nil {
		fmt.Fprintf(e.stderr, "seeding %d SKUs with %d units each\n", rig.keys.Len(), o.stock)
	}
	r, failed, err := loadgen.Execute(ctx, o.runSpec(rig, o.out, o.profile, sched, append([]string{"load"}, o.args...), o.thresholds, stop))
	if err != nil {
		return fail(err)
	}
	return report(e, r, failed)
}

// report prints the text summary and the verdict: exit 99 when a threshold
// failed.
func report(e *env, r *loadgen.Report, failed []loadgen.ThresholdResult) int {
	_ = r.WriteText(e.stdout)
	fmt.Fprintf(e.stdout, "report: %s\n", filepath.Join(r.Dir, loadgen.HTMLFile))
	if len(failed) > 0 {
		for _, f := range failed {
			fmt.Fprintf(e.stderr, "threshold failed: %s (got %s)\n", f.Expr, f.Got)
		}
		return exitThreshold
	}
	return exitOK
}

func (f *loadFlags) serveMetrics(ctx context.Context, e *env) (*loadgen.Metrics, func(), error) {
	if f.metricsAddr == "" {
		return nil, func() {}, nil
	}
	m := loadgen.NewMetrics()
	bound, stop, err := m.Serve(ctx, f.metricsAddr)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(e.stderr, "generator metrics on http://%s/metrics\n", bound)
	return m, stop, nil
}

// interruptible runs fn with a stop channel that the first SIGINT/SIGTERM
// closes (stop scheduling, drain, report). The second cancels fn's context
// and returns at once, waiting at most two seconds for fn to notice.
func interruptible(ctx context.Context, e *env, name string, fn func(ctx context.Context, stop <-chan struct{}) int) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	done := make(chan int, 1)
	go func() { done <- fn(ctx, stop) }()
	stopped := false
	for {
		select {
		case code := <-done:
			return code
		case <-e.signals:
			if !stopped {
				stopped = true
				close(stop)
				fmt.Fprintf(e.stderr, "\nredlab %s: interrupted: stopping the schedule, draining in-flight operations, writing the report (interrupt again to abort)\n", name)
				continue
			}
			cancel()
			fmt.Fprintf(e.stderr, "redlab %s: interrupted twice: aborting without a report\n", name)
			select {
			case <-done:
			case <-time.After(2 * time.Second):
			}
			return exitFailure
		}
	}
}

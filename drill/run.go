package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
	"github.com/redlocklab/redlocklab/internal/portclaim"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
)

// ResultFile is the verdict of a drill in its directory.
const ResultFile = "result.json"

// Options is how drills run.
type Options struct {
	// Out is the directory a drill writes into, as Out/<drill>/. A previous
	// run of the same drill there is replaced.
	Out string
	// Seed, when SeedSet, replaces every drill's workload seed.
	Seed    uint64
	SeedSet bool
	// Lab passes the lab's binaries and directories through (zero: the
	// lab's own defaults). StateDir and BasePort are chosen per drill.
	Lab lab.Config
	// Hosts, when set, runs the drills on the hosts of an inventory over
	// SSH instead of a lab (drill/hosts.go); Lab and Monitoring are unused.
	Hosts *HostsConfig
	// Monitoring, when set, runs the lab with its monitoring (exporters
	// and Prometheus, see lab.StartMonitoring) and serves every guard's
	// metrics to it. Prometheus keeps its data in Out/<drill>/prometheus,
	// which outlives the lab: see PrometheusDir.
	Monitoring *lab.MonitoringConfig
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Run runs one drill: lab up with its profile, every guard's load at once,
// the faults on schedule, heal, drain, check, compare with the expectations,
// lab down (also on error or when ctx ends). The returned Result says
// whether every expectation held; err is for a drill that could not run.
func Run(ctx context.Context, spec *Spec, opts Options) (*Result, error) {
	if opts.Out == "" {
		return nil, errors.New("drill: no output directory")
	}
	seed := spec.Workload.Seed
	if opts.SeedSet {
		seed = opts.Seed
	}
	logf := opts.logf(spec.Name)
	dir := filepath.Join(opts.Out, spec.Name)
	if err := prepareDir(dir); err != nil {
		return nil, err
	}

	// The lab lives in a directory of its own (its paths must be plain);
	// its fault log is copied into the drill's directory before it goes.
	state, err := os.MkdirTemp("", "redlab-drill-")
	if err != nil {
		return nil, fmt.Errorf("drill: %w", err)
	}
	defer os.RemoveAll(state)
	if opts.Hosts != nil {
		return runOnHosts(ctx, spec, opts, seed, dir, state, logf)
	}
	var leftOut []inventory.Guard
	if opts.Lab.Machines {
		if err := CheckMachines(spec); err != nil {
			return nil, err
		}
		if spec, leftOut, _ = spec.WithoutEtcd(); len(leftOut) > 0 {
			logf("guards %s left out: they lock on etcd members, which run next to process nodes only (they run in the process lab)", inventory.JoinGuards(leftOut))
		}
	}
	prof := spec.Lab
	// The power-loss filesystem only where a power loss needs it: every
	// other drill measures the servers on plain data directories.
	prof.PowerLoss = prof.PowerLoss || spec.CutsPower()
	l, err := upLab(ctx, prof, opts, state, logf)
	defer downLab(ctx, state, opts.Lab.Terraform, logf)
	if err != nil {
		return nil, fmt.Errorf("drill %s: %w", spec.Name, err)
	}
	if opts.Monitoring != nil {
		if err := startMonitoring(ctx, l, *opts.Monitoring, dir, logf); err != nil {
			return nil, fmt.Errorf("drill %s: %w", spec.Name, err)
		}
	}

	var scrape time.Duration
	if opts.Monitoring != nil {
		scrape = max(opts.Monitoring.ScrapeInterval, time.Millisecond)
	}
	res, err := runLoad(ctx, spec, seed, dir, l, scrape, logf)
	if res != nil {
		res.Lab.Machines, res.Lab.TLS, res.Lab.PlainDisks = l.Machines(), l.TLS(), !l.PowerLossLayer()
		res.Lab.EtcdUnsafeNoFsync = l.EtcdUnsafeNoFsync()
		for _, g := range leftOut {
			res.LeftOut = append(res.LeftOut, string(g))
		}
	}
	if ferr := copyFile(filepath.Join(state, lab.FaultsFile), filepath.Join(dir, lab.FaultsFile)); ferr != nil && err == nil {
		err = ferr
	}
	if err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(dir, ResultFile), res); err != nil {
		return nil, err
	}
	if err := WriteTimeline(dir); err != nil {
		return nil, err
	}
	logf("%s (%s)", res.Verdict(), dir)
	return res, nil
}

// logf is how a drill named name logs its progress to Log.
func (o Options) logf(name string) func(string, ...any) {
	// One line at a time: faults at the same instant are applied, and
	// logged, from goroutines of their own.
	var mu sync.Mutex
	return func(format string, a ...any) {
		if o.Log != nil {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(o.Log, "drill %s: "+format+"\n", append([]any{name}, a...)...)
		}
	}
}

// guardRun is one guard's load within a drill.
type guardRun struct {
	guard  inventory.Guard
	dir    string
	target loadgen.Target
	keys   *loadgen.KeyGen
	rec    *loadgen.Recorder
	// pause freezes holders in the drill's own process (scope request);
	// procs, when set, runs the guard's replicas as `redlab serve`
	// processes (scope process).
	pause  *pauser
	procs  *serveProcs
	sched  *loadgen.Schedule
	stages []loadgen.Stage
	// metrics is the guard's generator metrics (nil without monitoring).
	metrics *loadgen.Metrics

	// runID prefixes the guard's request IDs; hist records its operations.
	runID string
	hist  *History

	mu  sync.Mutex
	ops []opRecord

	report *loadgen.Report
	err    error
}

// opRecord is one operation's result, kept for the phase split and the
// validity check; started is zero for an operation never sent (late).
type opRecord struct {
	op             loadgen.Op
	res            loadgen.Result
	started, ended time.Time
}

func (g *guardRun) onResult(op loadgen.Op, res loadgen.Result, started, ended time.Time) {
	g.hist.AddOp(g.guard, g.runID, op, res, started, ended)
	g.mu.Lock()
	g.ops = append(g.ops, opRecord{op, res, started, ended})
	g.mu.Unlock()
}

// runLoad runs every guard's load on the lab with the fault schedule and
// judges the outcome.
//
// With scrape > 0 (monitoring on) every guard's metrics are served to the
// lab's Prometheus, which scrapes every scrape.
func runLoad(ctx context.Context, spec *Spec, seed uint64, dir string, l site, scrape time.Duration, logf func(string, ...any)) (*Result, error) {
	w := spec.Workload
	hist := NewHistory(time.Now())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var reg *prometheus.Registry
	if scrape > 0 {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		stop, err := serveMetrics(ctx, reg, l.StateDir(), spec.Name, scrape)
		if err != nil {
			return nil, fmt.Errorf("drill %s: %w", spec.Name, err)
		}
		// Deferred before the targets' Close below, so it runs after it:
		// Prometheus scrapes until the last reservation is counted.
		defer stop()
	}

	creds, err := l.Credentials()
	if err != nil {
		return nil, fmt.Errorf("drill %s: %w", spec.Name, err)
	}
	tlsCfg, err := l.TLSConfig()
	if err != nil {
		return nil, fmt.Errorf("drill %s: %w", spec.Name, err)
	}
	stages := []loadgen.Stage{{Duration: w.Duration, Rate: w.Rate}}
	runs := make([]*guardRun, 0, len(w.Guards))
	defer func() {
		for _, g := range runs {
			g.pause.stop()
			if g.procs != nil {
				if err := g.procs.stop(); err != nil {
					logf("guard %s: %v", g.guard, err)
				}
			}
			if g.target != nil {
				g.target.Close()
			}
		}
	}()
	processGuards := spec.ProcessGuards()
	for _, g := range w.Guards {
		gr := &guardRun{guard: g, dir: filepath.Join(dir, string(g)), pause: newPauser(g, hist), stages: stages,
			runID: "drill-" + spec.Name + "-" + string(g), hist: hist}
		runs = append(runs, gr)
		if gr.keys, err = loadgen.NewKeyGen(w.Keys, loadgen.Shard{Index: 0, Count: 1}); err != nil {
			return nil, fmt.Errorf("drill %s: %w", spec.Name, err)
		}
		gr.keys.Prefix(string(g) + ".")
		if gr.sched, err = loadgen.NewSchedule(stages, loadgen.Shard{Index: 0, Count: 1}); err != nil {
			return nil, fmt.Errorf("drill %s: %w", spec.Name, err)
		}
		if err := os.MkdirAll(gr.dir, 0o755); err != nil {
			return nil, fmt.Errorf("drill: %w", err)
		}
		gr.rec = loadgen.NewRecorder(len(l.Addrs()), 0)
		g := g
		var targetReg prometheus.Registerer
		if reg != nil {
			targetReg = reg
			if gr.metrics, err = loadgen.NewMetricsOn(prometheus.WrapRegistererWith(prometheus.Labels{"guard": string(g)}, reg)); err != nil {
				return nil, fmt.Errorf("drill %s: guard %s: %w", spec.Name, g, err)
			}
		}
		store := "sqlite:" + filepath.Join(gr.dir, "inventory.db")
		if slices.Contains(processGuards, g) {
			gr.procs, err = startServeProcs(ctx, serveConfig{
				Redlab: l.Config().Redlab, Guard: g, Replicas: w.Replicas, Nodes: l.NodeList(), TLSCA: l.TLSFiles().CA, Etcd: etcdEndpoints(l, g), StoreDSN: store,
				LockTTL: w.LockTTL, AcquireTimeout: w.AcquireTimeout, NodeTimeout: w.NodeTimeoutOf(g),
				Username: creds.Redlock.Name, Password: creds.Redlock.Password, StateDir: l.StateDir(), Dir: gr.dir,
			}, hist, logf)
			if err != nil {
				return nil, fmt.Errorf("drill %s: guard %s: %w", spec.Name, g, err)
			}
			logf("guard %s: %d redlab serve processes (%s)", g, len(gr.procs.procs), strings.Join(gr.procs.URLs(), ", "))
			// A target is kept only once made: a typed nil in the
			// interface would be closed by the cleanup above.
			var t *loadgen.HTTPTarget
			if t, err = loadgen.NewHTTPTarget(ctx, loadgen.HTTPConfig{URLs: gr.procs.URLs(), StoreDSN: store, RunID: gr.runID}); err == nil {
				gr.target = t
			}
		} else {
			var t *loadgen.InventoryTarget
			t, err = loadgen.NewInventoryTarget(ctx, loadgen.InventoryConfig{
				ReplicaConfig: inventory.ReplicaConfig{
					Nodes: l.Addrs(), Etcd: etcdEndpoints(l, g), Guard: g, StoreDSN: store,
					LockTTL: w.LockTTL, AcquireTimeout: w.AcquireTimeout, NodeTimeout: w.NodeTimeoutOf(g),
					Registerer: targetReg, PauseHook: gr.pause.hook,
					Username: creds.Redlock.Name, Password: creds.Redlock.Password, TLS: tlsCfg, TLSFiles: l.TLSFiles(), LogDir: gr.dir,
					OnHold: func(h inventory.Hold) { hist.AddHold(g, h) },
				},
				Replicas: w.Replicas, Recorder: gr.rec, Hold: w.Hold,
				RunID: gr.runID,
			})
			if err == nil {
				gr.target = t
			}
		}
		if err != nil {
			return nil, fmt.Errorf("drill %s: guard %s: %w", spec.Name, g, err)
		}
	}

	// Every guard seeds its stock, then waits here; the last one in starts
	// them all and the fault schedule at the same instant.
	start := newBarrier(len(runs), hist.begin)
	var wg sync.WaitGroup
	for _, gr := range runs {
		wg.Add(1)
		target := "inventory"
		if gr.procs != nil {
			target = "http"
		}
		go func() {
			defer wg.Done()
			gr.report, _, gr.err = loadgen.Execute(ctx, loadgen.RunSpec{
				Out: filepath.Join(gr.dir, "run"),
				Meta: loadgen.Meta{
					Command: "redlab drill " + spec.File, Target: target, Guard: string(gr.guard),
					Nodes: l.Addrs(), Etcd: etcdEndpoints(l, gr.guard), Replicas: w.Replicas, Stages: loadgen.FormatStages(stages),
					Keys: w.Keys.String(), Quantity: w.Quantity.String(), LockTTLMs: float64(w.LockTTL) / 1e6,
					Store: "sqlite:inventory.db (in the guard's directory)",
				},
				Engine: loadgen.Config{
					Schedule: gr.sched, Target: gr.target, Keys: gr.keys, Quantity: w.Quantity, Seed: seed,
					Recorder: gr.rec, OnResult: gr.onResult,
				},
				Stock:   w.Stock,
				Metrics: gr.metrics,
				Gate:    start.wait,
			})
			if gr.err != nil {
				cancel() // the others must not wait at the barrier
			}
		}()
	}

	// The fault schedule, from the instant the loads start.
	svc := &service{pausers: map[inventory.Guard]*pauser{}, procs: map[inventory.Guard]*serveProcs{}}
	for _, gr := range runs {
		svc.pausers[gr.guard] = gr.pause
		if gr.procs != nil {
			svc.procs[gr.guard] = gr.procs
		}
	}
	in := &injector{at: l, service: svc, log: logf, nodeN: spec.Lab.Nodes, etcdN: spec.Lab.Etcd}
	var faultErr error
	select {
	case t0 := <-start.released():
		logf("load started: %d guards × %g/s for %v", len(runs), w.Rate, w.Duration)
		faultErr = in.run(ctx, t0, spec.Faults, w.Duration)
		if wait := time.Until(t0.Add(w.Duration)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
		if ctx.Err() == nil {
			logf("t=%5.1fs load ends: heal all, drain", time.Since(t0).Seconds())
			if err := in.healAll(ctx); err != nil && faultErr == nil {
				faultErr = fmt.Errorf("drill: heal at the end: %w", err)
			}
		}
	case <-ctx.Done():
	}
	wg.Wait()
	var procErr error
	for _, gr := range runs {
		gr.pause.stop()
		// The processes drain and exit: their last holds reach the
		// history before it is written.
		if gr.procs != nil {
			if err := gr.procs.stop(); err != nil && procErr == nil {
				procErr = fmt.Errorf("drill %s: guard %s: %w", spec.Name, gr.guard, err)
			}
		}
	}
	for _, gr := range runs {
		if gr.err != nil {
			return nil, fmt.Errorf("drill %s: guard %s: %w", spec.Name, gr.guard, gr.err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("drill %s: %w", spec.Name, err)
	}
	if faultErr != nil {
		return nil, faultErr
	}
	if procErr != nil {
		return nil, procErr
	}

	// The lab's own record of its faults (with the moments nodes answered
	// again) joins the client pauses in the history.
	labFaults, err := l.Faults()
	if err != nil {
		return nil, fmt.Errorf("drill %s: %w", spec.Name, err)
	}
	for _, f := range labFaults {
		hist.addLabFault(f)
	}
	if err := hist.WriteFile(filepath.Join(dir, HistoryFile)); err != nil {
		return nil, err
	}
	res, err := judge(spec, seed, hist, runs, l.Addrs())
	if res != nil {
		res.PowerLossModel = in.powerLossModel()
	}
	if err != nil {
		return nil, err
	}
	if err := checkModel(ctx, spec, res, hist, runs, dir); err != nil {
		return nil, err
	}
	if len(res.Disagreements) > 0 {
		res.Passed = false
	}
	for _, gr := range runs {
		if err := finishRunDir(gr, labFaults, hist, drillInfo(spec, res, gr.guard)); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// finishRunDir gives a guard's run directory the drill's verdict (the
// safety judge put in its report: double grants from the history) and the
// drill's faults (the lab's, and the client pauses of this guard), and
// renders its report again, so that summary.json and report.html count what
// result.json counts and its charts shade the faults.
func finishRunDir(gr *guardRun, labFaults []lab.Fault, hist *History, info loadgen.DrillInfo) error {
	runDir := filepath.Join(gr.dir, "run")
	if err := loadgen.RecordSafety(runDir, gr.report.Safety); err != nil {
		return err
	}
	if err := loadgen.RecordDrill(runDir, info); err != nil {
		return err
	}
	var evs []faultlog.Event
	for _, f := range labFaults {
		evs = append(evs, f.Events()...)
	}
	t0 := hist.Start()
	for _, f := range hist.Faults() {
		if f.Guard != string(gr.guard) {
			continue
		}
		evs = append(evs, faultlog.Event{ID: f.ID, Kind: faultlog.Kind(f.Fault), Phase: faultlog.Phase(f.Event), Time: t0.Add(time.Duration(f.AtNs)).UTC()})
	}
	if len(evs) > 0 {
		if err := faultlog.Append(filepath.Join(runDir, faultlog.FileName), evs...); err != nil {
			return fmt.Errorf("drill: %w", err)
		}
	}
	r, err := loadgen.LoadReport(runDir)
	if err != nil {
		return err
	}
	return r.Write()
}

// drillInfo is what guard g's page says of the drill: its name, its
// verdict and the guard's own part.
func drillInfo(spec *Spec, res *Result, g inventory.Guard) loadgen.DrillInfo {
	info := loadgen.DrillInfo{Name: spec.Name, Verdict: res.Verdict(), Guard: "every expectation held"}
	var failed []string
	if gr := res.Guards[string(g)]; gr != nil {
		for _, x := range gr.Expectations {
			if !x.Held {
				failed = append(failed, fmt.Sprintf("%s (observed %s)", x.Expr, x.Observed))
			}
		}
	}
	switch {
	case res.Invalid != "":
		info.Guard = "not judged: " + res.Invalid
	case len(failed) > 0:
		info.Guard = "did not hold: " + strings.Join(failed, "; ")
	}
	return info
}

// barrier releases its waiters when n have arrived, after calling
// onRelease with the instant (the history's time zero, set before any
// waiter goes on).
type barrier struct {
	mu        sync.Mutex
	n         int
	at        time.Time
	onRelease func(time.Time)
	release   chan time.Time
	done      chan struct{}
}

func newBarrier(n int, onRelease func(time.Time)) *barrier {
	return &barrier{n: n, onRelease: onRelease, release: make(chan time.Time, 1), done: make(chan struct{})}
}

func (b *barrier) wait(ctx context.Context) error {
	b.mu.Lock()
	b.n--
	if b.n == 0 {
		b.at = time.Now()
		if b.onRelease != nil {
			b.onRelease(b.at)
		}
		b.release <- b.at
		close(b.done)
	}
	b.mu.Unlock()
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// released delivers the start instant once, to the fault schedule.
func (b *barrier) released() <-chan time.Time { return b.release }

// prepareDir makes dir ready for a run: created when missing, emptied when
// it holds an earlier run of a drill, refused when it holds anything else.
func prepareDir(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.MkdirAll(dir, 0o755)
	case err != nil:
		return fmt.Errorf("drill: %w", err)
	case len(ents) == 0:
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, ResultFile)); err != nil {
		if _, herr := os.Stat(filepath.Join(dir, HistoryFile)); herr != nil {
			return fmt.Errorf("drill: %s is not empty and holds no drill run: choose another --out", dir)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("drill: %w", err)
	}
	return os.MkdirAll(dir, 0o755)
}

// freeBasePort finds a lab base port whose port ranges (the nodes', with
// replicas or not, and the monitoring's) are free for n nodes, and the etcd
// members' ranges for etcd members, and claims them for the lab in state
// until downLab takes it down (internal/portclaim: another drill choosing
// meanwhile, in another process, cannot choose them too).
func freeBasePort(state string, n, replicas, etcd int) (int, error) {
	offsets := append(lab.PortOffsets(replicas), lab.MonitoringPortOffsets()...)
	step := 600
	if etcd > 0 {
		step = etcdPortStep
	}
	for base := lab.DefaultBasePort; base+step+n < 65535; base += step {
		ports := append(portclaim.Layout(base, n, offsets...), portclaim.Layout(base, etcd, lab.EtcdPortOffsets()...)...)
		release, ok, err := portclaim.Claim(ports)
		if err != nil {
			return 0, fmt.Errorf("drill: %w", err)
		}
		if ok {
			claims.Lock()
			claims.m[state] = release
			claims.Unlock()
			return base, nil
		}
	}
	return 0, errors.New("drill: no free port range for the lab")
}

// claims holds the port claims of this process's labs, by state directory.
var claims = struct {
	sync.Mutex
	m map[string]func()
}{m: map[string]func(){}}

// releasePorts drops the port claim of the lab in state, if any.
func releasePorts(state string) {
	claims.Lock()
	release := claims.m[state]
	delete(claims.m, state)
	claims.Unlock()
	if release != nil {
		release()
	}
}

func persistenceList(ps []lab.Persistence) string {
	same := true
	for _, p := range ps {
		same = same && p == ps[0]
	}
	if same && len(ps) > 0 {
		return string(ps[0])
	}
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ","
		}
		s += string(p)
	}
	return s
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("drill: %w", err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		return fmt.Errorf("drill: %w", err)
	}
	return nil
}

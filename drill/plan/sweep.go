package plan

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/redlocklab/redlocklab/internal/prose"

	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
)

// SweepConfig is how the plan finds the knee: redlab sweep's steps on the
// real nodes, under the target's SLO, with the redlock guard on keys that
// do not contend (the lock service's capacity, not the workload's
// contention, which depends on its keys).
type SweepConfig struct {
	// Step is each step's length.
	Step time.Duration
	// Start is the first rate (0: a quarter of the target, at most
	// 100/s); the steps double up to the target, which is always one, and
	// go on doubling past it until a step misses the SLO (a missed step
	// runs once more first: one stall of a shared host is not the knee),
	// then one step refines the gap. MaxRate bounds them (0: 16 times the
	// target).
	Start, MaxRate float64
	// Keys are the SKUs the load spreads over.
	Keys loadgen.KeySpec
	// Replicas are the in-process services, each with its own Redlock
	// client.
	Replicas int
}

// DefaultSweep is 10 s steps over 10,000 keys with two replicas.
func DefaultSweep() SweepConfig {
	return SweepConfig{Step: 10 * time.Second, Keys: loadgen.KeySpec{Kind: "uniform", N: 10000}, Replicas: 2}
}

// sweepReserved is the share of a step's operations that must reserve for
// it to count: capacity is reservations made, not answers.
const sweepReserved = "outcomes.reserved>=99%"

func (c SweepConfig) validate() error {
	switch {
	case c.Step < 100*time.Millisecond:
		return fmt.Errorf("plan: sweep steps of %v are too short to measure a p99", c.Step)
	case c.Start < 0 || c.MaxRate < 0:
		return errors.New("plan: sweep rates must be positive")
	case c.Replicas < 1:
		return errors.New("plan: the sweep needs at least one replica")
	case c.Keys.N < 1:
		return errors.New("plan: the sweep needs keys")
	}
	return nil
}

// rates0 is the sweep's first rate, which the warm-up runs at.
func rates0(c SweepConfig, target float64) float64 { return c.ladder(target)[0] }

// ladder is the sweep's listed rates: from start, doubling, up to the
// target, which ends it.
func (c SweepConfig) ladder(target float64) []float64 {
	start := c.Start
	if start <= 0 {
		start = min(target/4, 100)
	}
	var rates []float64
	for r := start; r < target; r *= 2 {
		rates = append(rates, math.Round(r*10)/10)
	}
	return append(rates, target)
}

// SweepResult is the sweep as plan.json keeps it.
type SweepResult struct {
	// Dir is the sweep directory, relative to the plan's.
	Dir   string   `json:"dir"`
	SLO   []string `json:"slo"`
	StepS float64  `json:"step_s"`
	Keys  string   `json:"keys"`
	// Knee is the highest rate that met the SLO (0: none); Bounded, a
	// higher rate missed it.
	Knee    float64 `json:"knee"`
	Bounded bool    `json:"bounded"`
	Steps   []Step  `json:"steps"`
}

// Step is one sweep step.
type Step struct {
	Rate     float64 `json:"rate"`
	Pass     bool    `json:"pass"`
	Why      string  `json:"why,omitempty"`
	Reserved float64 `json:"reserved_per_s"`
	// LateShare is the share of the step's operations the generator could
	// not send on time.
	LateShare float64 `json:"late_share"`
	// AcquireP50Ms and AcquireP99Ms are the lock's; NodeP99Ms the slowest
	// node's SET p99, NodeP99Node that node (from 1).
	AcquireP50Ms float64 `json:"acquire_p50_ms"`
	AcquireP99Ms float64 `json:"acquire_p99_ms"`
	NodeP99Ms    float64 `json:"node_p99_ms"`
	NodeP99Node  int     `json:"node_p99_node"`
	// CPUBusy is each watched host's CPU use during the step, 0..1.
	CPUBusy map[string]float64 `json:"cpu_busy"`
	// GeneratorCPUMsPerOp is this process's CPU per operation.
	GeneratorCPUMsPerOp float64 `json:"generator_cpu_ms_per_op"`
	Dir                 string  `json:"dir"`
}

// busiest is the step's busiest host and its CPU use.
func (s Step) busiest() (string, float64) {
	host, b := "", 0.0
	for h, v := range s.CPUBusy {
		if v > b || (v == b && h < host) {
			host, b = h, v
		}
	}
	return host, b
}

// thisMachine names the machine the plan runs on among the CPU hosts.
const thisMachine = "this machine"

// runSweep runs the sweep on the site's nodes.
func runSweep(ctx context.Context, cfg Config) (SweepResult, error) {
	s, sc := cfg.Site, cfg.Sweep
	dir := filepath.Join(cfg.Out, SweepDir)
	res := SweepResult{Dir: SweepDir, StepS: sc.Step.Seconds(), Keys: sc.Keys.String()}
	slo := append([]loadgen.Threshold(nil), cfg.Target.SLO...)
	reserved, err := loadgen.ParseThreshold(sweepReserved)
	if err != nil {
		return res, err
	}
	slo = append(slo, reserved)
	for _, t := range slo {
		res.SLO = append(res.SLO, t.Expr)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, fmt.Errorf("plan: %w", err)
	}
	shard := loadgen.Shard{Index: 0, Count: 1}
	keys, err := loadgen.NewKeyGen(sc.Keys, shard)
	if err != nil {
		return res, fmt.Errorf("plan: %w", err)
	}
	rec := loadgen.NewRecorder(len(s.Nodes), 0)
	runID := fmt.Sprintf("plan-%d", time.Now().UnixNano())
	target, err := loadgen.NewInventoryTarget(ctx, loadgen.InventoryConfig{
		ReplicaConfig: inventory.ReplicaConfig{
			Nodes: s.Nodes, Guard: inventory.GuardRedlock, StoreDSN: "sqlite:" + filepath.Join(dir, "inventory.db"),
			Username: s.Lock.User, Password: s.Lock.Password, TLS: s.TLS,
		},
		Replicas: sc.Replicas, Recorder: rec, RunID: runID,
	})
	if err != nil {
		return res, fmt.Errorf("plan: sweep: %w", err)
	}
	defer target.Close()

	cpus := append([]HostShell{{Host: thisMachine, Shell: LocalShell{}}}, s.CPUs...)
	var mu sync.Mutex
	busy := map[string]map[string]float64{}
	step := func(ctx context.Context, r float64, stepDir string) (*loadgen.Report, error) {
		stages := []loadgen.Stage{{Duration: sc.Step, Rate: r}}
		sched, err := loadgen.NewSchedule(stages, shard)
		if err != nil {
			return nil, err
		}
		before := cpuTimesOf(ctx, cpus)
		rep, _, err := loadgen.Execute(ctx, loadgen.RunSpec{
			Out: stepDir,
			Meta: loadgen.Meta{Command: cfg.Command, Target: "inventory", Guard: string(inventory.GuardRedlock), Nodes: s.Nodes,
				Replicas: sc.Replicas, Stages: loadgen.FormatStages(stages), Keys: sc.Keys.String(),
				Quantity: "1", LockTTLMs: float64(inventory.DefaultLockTTL) / 1e6, Store: "sqlite:inventory.db (in the sweep's directory)"},
			Engine: loadgen.Config{Schedule: sched, Target: target, Keys: keys, Quantity: loadgen.QuantitySpec{Min: 1, Max: 1},
				Seed: uint64(r), Recorder: rec},
			Stock: 1_000_000,
		})
		after := cpuTimesOf(ctx, cpus)
		b := map[string]float64{}
		for h, t0 := range before {
			if t1, ok := after[h]; ok {
				b[h] = busySince(t0, t1)
			}
		}
		mu.Lock()
		busy[filepath.Base(stepDir)] = b
		mu.Unlock()
		return rep, err
	}
	// A short run first, not judged: the replicas' connections and the
	// store's pages are warm for the first step, as for every later one.
	if _, err := step(ctx, rates0(sc, cfg.Target.Rate), filepath.Join(dir, "warm-up")); err != nil {
		return res, fmt.Errorf("plan: sweep: warm-up: %w", err)
	}
	maxRate := sc.MaxRate
	if maxRate <= 0 {
		maxRate = 16 * cfg.Target.Rate
	}
	rates := sc.ladder(cfg.Target.Rate)
	cfg.logf("sweep: %v steps at %s/s and up, under %s", sc.Step, prose.List(rates), joinExprs(slo))
	sw, err := loadgen.RunSweep(ctx, loadgen.SweepSpec{
		Out: dir, Rates: rates, SLO: slo, UntilMiss: true, Growth: 2, MaxRate: maxRate, Refine: true, RetryMissed: true,
		Step: step, Log: logWriter{cfg},
	}, nil)
	if err != nil {
		return res, err
	}
	res.Knee, res.Bounded = sw.Knee, sw.Bounded
	for _, st := range sw.Steps {
		out := Step{Rate: st.Rate, Pass: st.Pass, Why: st.Why, Reserved: st.Reserved, AcquireP99Ms: st.AcquireP99Ms,
			Dir: filepath.Join(SweepDir, st.Dir), CPUBusy: busy[st.Dir]}
		r, err := loadgen.LoadReport(filepath.Join(dir, st.Dir))
		if err != nil {
			return res, err
		}
		out.AcquireP50Ms = r.Summary.AcquireLatencyMs.P50
		if r.Summary.Requests > 0 {
			out.LateShare = float64(st.Late) / float64(r.Summary.Requests)
		}
		out.GeneratorCPUMsPerOp = r.Summary.GeneratorCPUMsPerOp
		for _, n := range r.Summary.PerNode {
			if n.LatencyMs.P99 > out.NodeP99Ms {
				out.NodeP99Ms, out.NodeP99Node = n.LatencyMs.P99, n.Node
			}
		}
		res.Steps = append(res.Steps, out)
	}
	return res, nil
}

// cpuTimesOf reads /proc/stat on every host; a host that cannot be read is
// left out.
func cpuTimesOf(ctx context.Context, hosts []HostShell) map[string]cpuTimes {
	out := map[string]cpuTimes{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := h.Shell.Run(ctx, cpuScript)
			if err != nil {
				return
			}
			t, err := parseCPU(o)
			if err != nil {
				return
			}
			mu.Lock()
			out[h.Host] = t
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func joinExprs(ts []loadgen.Threshold) string {
	s := ""
	for i, t := range ts {
		if i > 0 {
			s += " && "
		}
		s += t.Expr
	}
	return s
}

// logWriter writes the sweep's lines as the plan's progress.
type logWriter struct{ cfg Config }

func (w logWriter) Write(b []byte) (int, error) {
	if w.cfg.Log != nil {
		return w.cfg.Log.Write(append([]byte("plan: "), b...))
	}
	return len(b), nil
}

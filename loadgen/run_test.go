package loadgen

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func newTestEngine(t testing.TB, rate float64, d time.Duration, target Target, tweak func(*Config)) (*Engine, *[]Interval) {
	t.Helper()
	s, err := ConstantSchedule(rate, d, Shard{})
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := ParseKeys("uniform:10")
	kg, err := NewKeyGen(ks, Shard{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ivs []Interval
	cfg := Config{
		Schedule: s, Target: target, Keys: kg, Seed: 1,
		Interval: 50 * time.Millisecond,
		Sinks: []IntervalSink{func(iv *Interval) error {
			mu.Lock()
			defer mu.Unlock()
			cp := *iv
			cp.Hists = NewHistSet(0)
			cp.Hists.Merge(iv.Hists)
			ivs = append(ivs, cp)
			return nil
		}},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e, &ivs
}

func sumIntervals(ivs []Interval) (total *HistSet, scheduled int64) {
	total = NewHistSet(0)
	for _, iv := range ivs {
		total.Merge(iv.Hists)
		scheduled += iv.Scheduled
	}
	return total, scheduled
}

func TestEngineRunsTheWholeSchedule(t *testing.T) {
	var keys sync.Map
	target := targetFunc(func(_ context.Context, op Op) Result {
		keys.Store(op.Key, true)
		if op.Quantity != 1 {
			t.Errorf("quantity %d, want 1", op.Quantity)
		}
		return Result{Outcome: Reserved}
	})
	e, ivs := newTestEngine(t, 2000, 300*time.Millisecond, target, nil)
	info, err := e.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Planned != 600 || info.Scheduled != 600 || info.Refused != 0 || info.Stopped {
		t.Errorf("info = %+v, want 600 planned and scheduled, none refused, not stopped", info)
	}
	total, sched := sumIntervals(*ivs)
	if got := total.Requests(); got != 600 || sched != 600 {
		t.Errorf("intervals: got %d requests, %d scheduled; want 600, 600", got, sched)
	}
	if total.Outcomes[Reserved] != 600 || total.E2E.TotalCount() != 600 || total.E2EUncorrected.TotalCount() != 600 {
		t.Errorf("got %d reserved, %d e2e samples; want 600", total.Outcomes[Reserved], total.E2E.TotalCount())
	}
	if total.Acquire.TotalCount() != 0 {
		t.Errorf("acquire samples without a lock: got %d, want 0", total.Acquire.TotalCount())
	}
	last := (*ivs)[len(*ivs)-1]
	if !last.Final || last.Index != info.Intervals-1 {
		t.Errorf("last interval: final=%v index=%d, want final and index %d", last.Final, last.Index, info.Intervals-1)
	}
	for i, iv := range *ivs {
		if iv.Index != i || iv.End.Before(iv.Start) {
			t.Errorf("interval %d: index %d, [%v, %v]", i, iv.Index, iv.Start, iv.End)
		}
	}
	n := 0
	keys.Range(func(any, any) bool { n++; return true })
	if n != 10 {
		t.Errorf("used %d distinct keys, want 10", n)
	}
}

type targetFunc func(ctx context.Context, op Op) Result

func (f targetFunc) Do(ctx context.Context, op Op) Result { return f(ctx, op) }
func (targetFunc) Close() error                           { return nil }

func TestEngineCountsRefusedOpsAsLate(t *testing.T) {
	release := make(chan struct{})
	target := targetFunc(func(ctx context.Context, _ Op) Result {
		<-release
		return Result{Outcome: Reserved, Lock: true, Acquire: time.Millisecond, Hold: time.Millisecond, Attempts: 2}
	})
	e, ivs := newTestEngine(t, 1000, 100*time.Millisecond, target, func(c *Config) { c.MaxInFlight = 3 })
	go func() {
		// Hold the three slots until every op has had its turn.
		for e.scheduled.Load() < 100 {
			time.Sleep(time.Millisecond)
		}
		close(release)
	}()
	info, err := e.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	total, sched := sumIntervals(*ivs)
	if info.Scheduled != 100 || sched != 100 || info.Refused != 97 {
		t.Errorf("got scheduled %d (intervals %d), refused %d; want 100, 100, 97", info.Scheduled, sched, info.Refused)
	}
	if total.Outcomes[Late] != 97 || total.Outcomes[Reserved] != 3 || total.Requests() != 100 {
		t.Errorf("outcomes %v: want 97 late, 3 reserved, 100 in all", total.Outcomes)
	}
	if total.Attempts.TotalCount() != 3 || total.Attempts.Max() != 2 || total.Hold.TotalCount() != 3 {
		t.Errorf("attempts: got %d samples max %d, hold %d; want 3, 2, 3", total.Attempts.TotalCount(), total.Attempts.Max(), total.Hold.TotalCount())
	}
	// The three that waited have their wait in the corrected latency only.
	if c, u := total.E2E.Max(), total.E2EUncorrected.Max(); c < u {
		t.Errorf("corrected max %v < uncorrected max %v", time.Duration(c), time.Duration(u))
	}
}

func TestEngineStopDrains(t *testing.T) {
	var mu sync.Mutex
	started := 0
	var e *Engine
	target := targetFunc(func(ctx context.Context, _ Op) Result {
		mu.Lock()
		started++
		if started == 5 {
			e.Stop()
			e.Stop() // idempotent
		}
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // still in flight when the schedule stops
		return Result{Outcome: OutOfStock}
	})
	e, ivs := newTestEngine(t, 200, 10*time.Second, target, nil)
	info, err := e.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !info.Stopped || info.Scheduled >= info.Planned {
		t.Errorf("info = %+v: want stopped early", info)
	}
	total, _ := sumIntervals(*ivs)
	if got := total.Requests(); got != int64(info.Scheduled) || total.Outcomes[OutOfStock] != got {
		t.Errorf("drained %d of %d scheduled (outcomes %v): want all", got, info.Scheduled, total.Outcomes)
	}
}

func TestEngineCancelAbandons(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	target := targetFunc(func(ctx context.Context, _ Op) Result {
		cancel()
		<-ctx.Done()
		return Result{Outcome: Error}
	})
	e, _ := newTestEngine(t, 100, 10*time.Second, target, nil)
	info, err := e.Run(ctx)
	if err != context.Canceled {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if info.Scheduled >= info.Planned {
		t.Errorf("scheduled %d of %d after cancel", info.Scheduled, info.Planned)
	}
}

// TestEngineDrainIsBounded: an operation that ignores its context (a
// client blocked without a deadline) makes Run fail once the drain
// timeout has passed, saying so, instead of waiting for it forever.
func TestEngineDrainIsBounded(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var once sync.Once
	target := targetFunc(func(ctx context.Context, _ Op) Result {
		blocked := false
		once.Do(func() { blocked = true })
		if blocked {
			<-release // deaf to ctx
		}
		return Result{Outcome: OutOfStock}
	})
	e, _ := newTestEngine(t, 100, 100*time.Millisecond, target, func(c *Config) { c.DrainTimeout = 50 * time.Millisecond })
	_, err := e.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "1 operations still in flight") || !strings.Contains(err.Error(), "ignores its context") {
		t.Fatalf("err = %v, want the stuck operation named", err)
	}
}

// BenchmarkEngineNoop measures the generator's cost per recorded operation
// on one core: the schedule is always due (rate far beyond what one core
// can do), the target does nothing, every operation is recorded.
func BenchmarkEngineNoop(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const rate = 1e9
	d := time.Duration(float64(b.N) / rate * float64(time.Second))
	if d <= 0 {
		d = 1
	}
	e, _ := newTestEngine(b, rate, d, NoopTarget{}, func(c *Config) {
		c.LateTolerance = time.Hour // nothing is refused: measure throughput
		c.MaxInFlight = 4096
		c.Sinks = nil
		c.Interval = time.Second
	})
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	info, err := e.Run(context.Background())
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	cpu := cpuTime(b) - cpu0
	el := info.End.Sub(info.Start).Seconds()
	b.ReportMetric(float64(info.Scheduled)/el, "ops/s")
	// CPU time per op is what one core can do, however busy the machine is.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(info.Scheduled), "cpu-ns/op")
	b.ReportMetric(float64(info.Scheduled)/cpu.Seconds(), "ops/cpu-s")
}

// cpuTime is the process's user+system time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEngineRate200k paces 200 000 operations per second on one core
// and reports how many started late or were refused: both must stay ~0.
func BenchmarkEngineRate200k(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const rate = 200_000
	d := time.Duration(float64(b.N) / rate * float64(time.Second))
	if d < time.Millisecond {
		d = time.Millisecond
	}
	var late int64
	var ops int64
	e, _ := newTestEngine(b, rate, d, NoopTarget{}, func(c *Config) {
		c.Interval = 100 * time.Millisecond
		c.Sinks = []IntervalSink{func(iv *Interval) error {
			late += iv.Hists.LateStarts + iv.Hists.Outcomes[Late]
			ops += iv.Hists.Requests()
			return nil
		}}
	})
	cpu0 := cpuTime(b)
	b.ResetTimer()
	info, err := e.Run(context.Background())
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	cpu := cpuTime(b) - cpu0
	el := info.End.Sub(info.Start).Seconds()
	b.ReportMetric(float64(ops)/el, "achieved_ops/s")
	b.ReportMetric(cpu.Seconds()/el, "cpu_cores")
	b.ReportMetric(float64(late)/float64(max(ops, 1)), "late_ratio")
}

func TestEngineAccountsWatchedProcesses(t *testing.T) {
	// A process that has exited cannot be read: its share is marked lost.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	if got := pidCPU(os.Getpid()); got < 0 {
		t.Fatalf("pidCPU(self): got %v, want >= 0", got)
	}
	// The target burns CPU in this process, which watches itself: the
	// watched share must see it (the burn is many clock ticks long).
	const burn = 200 * time.Millisecond
	var once sync.Once
	target := targetFunc(func(context.Context, Op) Result {
		once.Do(func() {
			for c0 := processCPU(); processCPU()-c0 < burn; {
			}
		})
		return Result{Outcome: Reserved}
	})
	e, _ := newTestEngine(t, 100, 50*time.Millisecond, target, func(c *Config) {
		c.Watch = []WatchedProcess{{Name: "self", PID: os.Getpid()}, {Name: "gone", PID: gone.Process.Pid}}
	})
	info, err := e.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Watched) != 2 {
		t.Fatalf("watched: got %+v, want 2 entries", info.Watched)
	}
	if self := info.Watched[0]; self.Name != "self" || self.Lost || self.Seconds < (burn/2).Seconds() {
		t.Errorf("watched self: got %+v, want not lost and at least %v", self, burn/2)
	}
	if g := info.Watched[1]; !g.Lost || g.Seconds != 0 {
		t.Errorf("watched exited process: got %+v, want lost with no seconds", g)
	}
}

func TestSummaryCPUPerReservation(t *testing.T) {
	tests := []struct {
		name  string
		procs []ProcessCPU
		want  float64
	}{
		{"generator only", nil, 2},
		{"every process", []ProcessCPU{{Name: "a", Seconds: 0.5}, {Name: "b", Seconds: 0.5}}, 4},
		{"one lost", []ProcessCPU{{Name: "a", Seconds: 0.5}, {Name: "b", Lost: true}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{Totals: NewHistSet(0), Meta: Meta{CPUSeconds: 1, Processes: tc.procs}}
			r.Totals.Outcomes[Reserved] = 500
			if got := buildSummary(r).CPUMsPerReserved; got != tc.want {
				t.Errorf("cpu_ms_per_reserved: got %v, want %v", got, tc.want)
			}
		})
	}
}

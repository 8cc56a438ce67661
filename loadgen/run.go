package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults of the engine.
const (
	DefaultMaxInFlight   = 1000
	DefaultLateTolerance = 10 * time.Millisecond
	DefaultInterval      = time.Second
	DefaultDrainTimeout  = time.Minute
)

// Config is everything the engine needs.
type Config struct {
	Schedule *Schedule
	Target   Target
	Keys     *KeyGen
	Quantity QuantitySpec
	// Seed makes the key and quantity sequence reproducible.
	Seed uint64
	// MaxInFlight bounds concurrent operations (and worker goroutines).
	MaxInFlight int
	// LateTolerance is how far past its intended start an operation may be
	// sent before it counts as late; an operation that finds no free slot
	// within it is not sent at all (outcome "late").
	LateTolerance time.Duration
	// Interval is the collection period of histograms and counters.
	Interval time.Duration
	Clock    Clock
	Recorder *Recorder
	// Sinks receive every interval, in order, on the collector goroutine.
	Sinks []IntervalSink
	// DoubleGrants and LockViolations, when set, are sampled into every
	// interval.
	DoubleGrants   func() int64
	LockViolations func() int64
	// OnStart, when set, is called with the run's start time before the
	// first operation is scheduled.
	OnStart func(start time.Time)
	// Watch lists other processes whose CPU time is accounted over the run
	// (read from /proc), such as the lock nodes and their fronts: the cost
	// of a reservation is the sum over every process that served it.
	Watch []WatchedProcess
	// OnResult, when set, is called on the worker's goroutine after every
	// operation sent, with its result, when it was sent and when it ended
	// (for per-phase figures and histories kept outside the run), and on
	// the pacer's for every operation never sent (Outcome Late, both times
	// zero). It must be fast and safe for concurrent use.
	OnResult func(op Op, res Result, started, ended time.Time)
	// DrainTimeout bounds the wait for the operations still in flight once
	// the schedule has ended (default DefaultDrainTimeout). An operation
	// that outlives it ignores its context, a client blocked without a
	// deadline: Run then fails and says so rather than wait forever.
	DrainTimeout time.Duration
}

// IntervalSink consumes one collected interval. iv.Hists is reused after the
// call returns.
type IntervalSink func(iv *Interval) error

// Interval is what the collector gathered over one period.
type Interval struct {
	Index      int
	Start, End time.Time
	// Hists holds the operations that ended in the interval (and the late
	// ones refused in it), with their counters.
	Hists *HistSet
	// Scheduled counts operations whose turn came in the interval.
	Scheduled int64
	// InFlight is the number of operations outstanding at the end.
	InFlight int64
	// TargetRate is this shard's scheduled rate in the interval (ops/s).
	TargetRate float64
	// DoubleGrants and LockViolations are the running totals so far.
	DoubleGrants   int64
	LockViolations int64
	// Final marks the last interval of the run.
	Final bool
}

// Info describes a finished run.
type Info struct {
	Start, End time.Time
	// Planned is the number of operations in the schedule; Scheduled those
	// whose turn came before the run ended (less than Planned when stopped).
	Planned, Scheduled uint64
	Refused            int64
	Stopped            bool // stopped early (first interrupt)
	Intervals          int
	// CPU is the CPU time (user and system) this process used from the
	// start of the schedule to the end of the drain: the generator and,
	// with in-process replicas, everything they run (store, lock clients).
	CPU time.Duration
	// Watched is the CPU time of each of Config.Watch over the same span.
	Watched []ProcessCPU
}

// WatchedProcess is another process whose CPU time a run accounts.
type WatchedProcess struct {
	Name string // what it is, e.g. "node1 redis-server"
	PID  int
}

// ProcessCPU is the CPU time a watched process used during a run.
type ProcessCPU struct {
	Name    string  `json:"name"`
	PID     int     `json:"pid"`
	Seconds float64 `json:"cpu_s"`
	// Lost is set when the process could not be read at the start or the
	// end (it exited or restarted): Seconds is then not its whole share.
	Lost bool `json:"lost,omitempty"`
}

// Engine runs one open-loop load.
type Engine struct {
	cfg      Config
	stop     chan struct{}
	stopOnce sync.Once

	inFlight  atomic.Int64 // sent and not yet ended, queued included
	idleMu    sync.Mutex
	idle      []*worker // free workers, most recently freed last
	scheduled atomic.Int64
	refused   atomic.Int64
	waiting   atomic.Bool   // the pacer waits for a slot
	freed     chan struct{} // a slot freed while the pacer waited
}

// withDefaults fills in the default in-flight bound, lateness tolerance and
// collection interval.
func (cfg Config) withDefaults() Config {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.LateTolerance <= 0 {
		cfg.LateTolerance = DefaultLateTolerance
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	return cfg
}

// NewEngine validates cfg and fills in defaults.
func NewEngine(cfg Config) (*Engine, error) {
	if cfg.Schedule == nil || cfg.Target == nil || cfg.Keys == nil {
		return nil, errors.New("loadgen: engine needs a schedule, a target and keys")
	}
	cfg = cfg.withDefaults()
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Recorder == nil {
		cfg.Recorder = NewRecorder(0, 0)
	}
	if cfg.Quantity.Min < 1 {
		cfg.Quantity = QuantitySpec{Min: 1, Max: 1}
	}
	return &Engine{cfg: cfg, stop: make(chan struct{}), freed: make(chan struct{}, 1)}, nil
}

// Stop ends the schedule early; Run then drains the operations in flight and
// returns normally. Safe to call more than once and from any goroutine.
func (e *Engine) Stop() { e.stopOnce.Do(func() { close(e.stop) }) }

// InFlight is the number of operations outstanding now.
func (e *Engine) InFlight() int64 { return e.inFlight.Load() }

// Run executes the schedule from now. It returns once every operation sent
// has ended and the last interval has been delivered to the sinks. Cancelling
// ctx abandons the schedule and cancels the operations in flight.
func (e *Engine) Run(ctx context.Context) (Info, error) {
	cfg := e.cfg
	clk := cfg.Clock
	start := clk.Now()
	cpu0 := processCPU()
	watch0 := make([]time.Duration, len(cfg.Watch))
	for i, w := range cfg.Watch {
		watch0[i] = pidCPU(w.PID)
	}
	if cfg.OnStart != nil {
		cfg.OnStart(start)
	}
	info := Info{Start: start, Planned: cfg.Schedule.Len()}

	type collected struct {
		intervals int
		err       error
	}
	collectorDone := make(chan collected, 1)
	stopCollector := make(chan struct{})
	var endTime atomic.Pointer[time.Time]
	go func() {
		n, err := e.collect(start, stopCollector, &endTime)
		collectorDone <- collected{n, err}
	}()

	var wg sync.WaitGroup
	var workers []*worker
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	var slotTimer Timer
	const pacerShard = 0

	// waitSlot blocks until an in-flight slot frees, for at most the
	// lateness tolerance of the operation due at intended.
	waitSlot := func(intended time.Time) (ok, quit bool) {
		for e.inFlight.Load() >= int64(cfg.MaxInFlight) {
			wait := intended.Add(cfg.LateTolerance).Sub(clk.Now())
			if wait <= 0 {
				// Already past the tolerance (the pacer itself was held
				// up): let runnable workers finish before refusing, so a
				// stall of the generator is not taken for a slow target.
				runtime.Gosched()
				return e.inFlight.Load() < int64(cfg.MaxInFlight), false
			}
			e.waiting.Store(true)
			if e.inFlight.Load() < int64(cfg.MaxInFlight) {
				e.waiting.Store(false)
				return true, false
			}
			if slotTimer == nil {
				slotTimer = clk.NewTimer(wait)
			} else {
				slotTimer.Reset(wait)
			}
			select {
			case <-e.freed:
				slotTimer.Stop()
			case <-slotTimer.C():
			case <-ctx.Done():
				quit = true
			case <-e.stop:
				quit = true
			}
			e.waiting.Store(false)
			if quit {
				slotTimer.Stop()
				return false, true
			}
		}
		return true, false
	}

	emit := func(k uint64, intended time.Time) bool {
		op := Op{Seq: k, Intended: intended}
		op.Key = cfg.Keys.Name(cfg.Keys.Next(rng))
		op.Quantity = cfg.Quantity.Next(rng)
		ok, quit := waitSlot(intended)
		if quit {
			return false
		}
		e.scheduled.Add(1)
		if !ok {
			e.refused.Add(1)
			cfg.Recorder.RecordLate(pacerShard)
			if cfg.OnResult != nil {
				cfg.OnResult(op, Result{Outcome: Late}, time.Time{}, time.Time{})
			}
			return true
		}
		e.inFlight.Add(1)
		// The worker freed last is the one whose stack is still in cache.
		e.idleMu.Lock()
		var w *worker
		if n := len(e.idle); n > 0 {
			w, e.idle = e.idle[n-1], e.idle[:n-1]
		}
		e.idleMu.Unlock()
		if w != nil {
			w.ops <- op // never blocks: an idle worker's buffer is empty
			return true
		}
		w = &worker{id: len(workers), ops: make(chan Op, 1)}
		workers = append(workers, w)
		wg.Add(1)
		go e.work(ctx, w, op, &wg)
		return true
	}
	cfg.Schedule.Pace(ctx, clk, start, e.stop, emit)
	select {
	case <-e.stop:
		info.Stopped = true
	default:
	}
	for _, w := range workers {
		close(w.ops)
	}
	drained := make(chan struct{})
	go func() {
		wg.Wait()
		close(drained)
	}()
	var stuck error
	select {
	case <-drained:
	case <-time.After(cfg.DrainTimeout):
		// Those goroutines cannot be ended from here; the caller learns
		// why the run failed instead of waiting with them.
		stuck = fmt.Errorf("loadgen: %d operations still in flight %v after the schedule ended: the target ignores its context (a client blocked without a deadline)",
			e.inFlight.Load(), cfg.DrainTimeout)
	}
	end := clk.Now()
	info.CPU = processCPU() - cpu0
	for i, w := range cfg.Watch {
		end := pidCPU(w.PID)
		pc := ProcessCPU{Name: w.Name, PID: w.PID, Lost: watch0[i] < 0 || end < 0 || end < watch0[i]}
		if !pc.Lost {
			pc.Seconds = math.Round((end-watch0[i]).Seconds()*1000) / 1000
		}
		info.Watched = append(info.Watched, pc)
	}
	endTime.Store(&end)
	close(stopCollector)
	c := <-collectorDone
	err := c.err
	if stuck != nil {
		err = stuck
	}
	info.End, info.Intervals = end, c.intervals
	info.Scheduled = uint64(e.scheduled.Load())
	info.Refused = e.refused.Load()
	if err == nil {
		err = ctx.Err()
	}
	return info, err
}

// processCPU is the CPU time this process has used so far, user and
// system; 0 where getrusage fails.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pidCPU is the CPU time process pid has used so far (user and system, from
// /proc/PID/stat in clock ticks of 1/100 s, USER_HZ on every Linux
// architecture); negative when it cannot be read.
func pidCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The command name (field 2) may hold spaces and parentheses: count
	// fields from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	// utime and stime are fields 14 and 15 of the line, 12 and 13 here.
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// worker runs operations one at a time; it records into the recorder shard
// of its id.
type worker struct {
	id  int
	ops chan Op
}

func (e *Engine) work(ctx context.Context, w *worker, op Op, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		e.do(ctx, w.id, op)
		e.idleMu.Lock()
		e.idle = append(e.idle, w)
		e.idleMu.Unlock()
		var ok bool
		if op, ok = <-w.ops; !ok {
			return
		}
	}
}

func (e *Engine) do(ctx context.Context, shard int, op Op) {
	clk := e.cfg.Clock
	started := clk.Now()
	res := e.cfg.Target.Do(ctx, op)
	ended := clk.Now()
	e.inFlight.Add(-1)
	if e.waiting.Load() {
		select {
		case e.freed <- struct{}{}:
		default:
		}
	}
	if e.cfg.OnResult != nil {
		e.cfg.OnResult(op, res, started, ended)
	}
	e.cfg.Recorder.Record(shard, Sample{
		Outcome:        res.Outcome,
		E2E:            ended.Sub(op.Intended),
		E2EUncorrected: ended.Sub(started),
		LateStart:      started.Sub(op.Intended) > e.cfg.LateTolerance,
		Lock:           res.Lock,
		Acquire:        res.Acquire,
		Hold:           res.Hold,
		Release:        res.Release,
		Attempts:       res.Attempts,
		Conflicts:      res.Conflicts,
	})
}

// collect delivers one Interval per period until stopped, then a final one
// covering the rest of the run.
func (e *Engine) collect(start time.Time, stop <-chan struct{}, end *atomic.Pointer[time.Time]) (int, error) {
	cfg := e.cfg
	clk := cfg.Clock
	iv := &Interval{Hists: NewHistSet(cfg.Recorder.Nodes())}
	timer := clk.NewTimer(cfg.Interval)
	defer timer.Stop()
	var firstErr error
	var lastScheduled int64
	for i := 0; ; i++ {
		ivStart := start.Add(time.Duration(i) * cfg.Interval)
		ivEnd := ivStart.Add(cfg.Interval)
		final := false
		select {
		case <-timer.C():
		case <-stop:
			final = true
		}
		if final {
			// When the timer and the stop were both ready and the timer
			// won, the run ended before this last interval's start.
			ivEnd = *end.Load()
			if ivEnd.Before(ivStart) {
				ivEnd = ivStart
			}
		}
		cfg.Recorder.Collect(iv.Hists)
		sched := e.scheduled.Load()
		iv.Index, iv.Start, iv.End, iv.Final = i, ivStart, ivEnd, final
		iv.Scheduled, lastScheduled = sched-lastScheduled, sched
		iv.InFlight = e.inFlight.Load()
		mid := ivStart.Add(ivEnd.Sub(ivStart) / 2).Sub(start)
		iv.TargetRate = cfg.Schedule.ShardRateAt(mid)
		if cfg.DoubleGrants != nil {
			iv.DoubleGrants = cfg.DoubleGrants()
		}
		if cfg.LockViolations != nil {
			iv.LockViolations = cfg.LockViolations()
		}
		for _, sink := range cfg.Sinks {
			if err := sink(iv); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		iv.Hists.Reset()
		if final {
			return i + 1, firstErr
		}
		if wait := start.Add(time.Duration(i+2) * cfg.Interval).Sub(clk.Now()); wait > 0 {
			timer.Reset(wait)
		} else {
			timer.Reset(time.Nanosecond)
		}
	}
}

// SampleCPU is the CPU time each of ps uses over d (or until ctx ends),
// with no load of this process's: the lab's idle baseline, beside which a
// load's cost is read. A process that cannot be read at the start or the
// end is marked Lost.
func SampleCPU(ctx context.Context, ps []WatchedProcess, d time.Duration) ([]ProcessCPU, time.Duration, error) {
	start := time.Now()
	before := make([]time.Duration, len(ps))
	for i, p := range ps {
		before[i] = pidCPU(p.PID)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	elapsed := time.Since(start)
	out := make([]ProcessCPU, len(ps))
	for i, p := range ps {
		end := pidCPU(p.PID)
		pc := ProcessCPU{Name: p.Name, PID: p.PID, Lost: before[i] < 0 || end < 0 || end < before[i]}
		if !pc.Lost {
			pc.Seconds = (end - before[i]).Seconds()
		}
		out[i] = pc
	}
	return out, elapsed, nil
}

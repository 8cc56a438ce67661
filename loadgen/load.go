package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
)

// RunSpec is one load run into a directory.
type RunSpec struct {
	// Out is the run directory; it must not hold a run already (PrepareDir
	// clears an earlier one).
	Out string
	// Meta is the configuration to record; Execute fills in the engine
	// settings, times and counts.
	Meta Meta
	// Engine is the engine configuration without sinks.
	Engine Config
	// Stock is seeded for every SKU of the run when the target is a Preparer.
	Stock int64
	// Status, when set, gets the live status line every interval; StatusTTY
	// makes it rewrite one line.
	Status    io.Writer
	StatusTTY bool
	// Metrics, when set, is updated every interval.
	Metrics *Metrics
	// Thresholds are judged on the finished run.
	Thresholds []Threshold
	// Stop, when closed, ends the schedule early; the run then drains and is
	// reported as usual (the first interrupt).
	Stop <-chan struct{}
	// Gate, when set, is called once the target is prepared (stock seeded)
	// and before the schedule starts; the run starts when it returns, and is
	// abandoned when it returns an error. Runs that must start at one instant
	// (the guards of a drill) share a barrier here.
	Gate func(ctx context.Context) error
	// FaultLog, when set, is the faults.jsonl of the lab the run loaded:
	// the faults it recorded during the run are copied into the run
	// directory before the report is rendered, so that its charts shade
	// them as a drill's do. A missing file is no faults.
	FaultLog string
}

// ErrAborted is returned when ctx ended before the run was recorded.
var ErrAborted = errors.New("loadgen: run aborted before it was recorded")

// violationCounter is implemented by targets whose hold checker also
// counts lock violations as it goes.
type violationCounter interface {
	LockViolations() int64
}

var _ violationCounter = (*InventoryTarget)(nil)

// beginner is implemented by targets that keep per-run state (the hold
// checker), reset at the start of every run.
type beginner interface {
	Begin(start time.Time)
}

// Execute prepares the target, runs the schedule, audits safety, records the
// run directory and renders its reports. It returns the report and the
// thresholds that failed.
func Execute(ctx context.Context, spec RunSpec) (*Report, []ThresholdResult, error) {
	cfg := spec.Engine.withDefaults()
	if cfg.Schedule == nil || cfg.Target == nil || cfg.Keys == nil {
		return nil, nil, errors.New("loadgen: run needs a schedule, a target and keys")
	}
	meta := spec.Meta
	meta.IntervalMs = cfg.Interval.Milliseconds()
	meta.MaxInFlight = cfg.MaxInFlight
	meta.LateTolMs = float64(cfg.LateTolerance) / 1e6
	meta.Seed = cfg.Seed
	meta.Stock = spec.Stock
	meta.Thresholds = nil
	for _, t := range spec.Thresholds {
		meta.Thresholds = append(meta.Thresholds, t.Expr)
	}
	if meta.Quantity == "" {
		meta.Quantity = cfg.Quantity.String()
	}

	w, err := CreateRun(spec.Out, meta)
	if err != nil {
		return nil, nil, err
	}
	defer w.Close()

	if p, ok := cfg.Target.(Preparer); ok {
		if err := p.Prepare(ctx, cfg.Keys.Names(), spec.Stock); err != nil {
			return nil, nil, fmt.Errorf("loadgen: seed stock: %w", err)
		}
	}
	checker, _ := cfg.Target.(SafetyChecker)
	if checker != nil {
		cfg.DoubleGrants = checker.DoubleGrants
	}
	if v, ok := cfg.Target.(violationCounter); ok {
		cfg.LockViolations = v.LockViolations
	}
	if b, ok := cfg.Target.(beginner); ok {
		prev := cfg.OnStart
		cfg.OnStart = func(start time.Time) {
			b.Begin(start)
			if prev != nil {
				prev(start)
			}
		}
	}
	cfg.Sinks = append(cfg.Sinks, w.Interval)
	if spec.Metrics != nil {
		cfg.Sinks = append(cfg.Sinks, spec.Metrics.Interval)
	}
	if spec.Status != nil {
		var st *statusLine
		cfg.Sinks = append(cfg.Sinks, func(iv *Interval) error {
			if st == nil {
				st = newStatusLine(spec.Status, spec.StatusTTY, iv.Start.Add(-time.Duration(iv.Index)*cfg.Interval))
			}
			return st.Interval(iv)
		})
	}
	engine, err := NewEngine(cfg)
	if err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	defer close(done)
	if spec.Stop != nil {
		go func() {
			select {
			case <-spec.Stop:
				engine.Stop()
			case <-done:
			}
		}()
	}
	if spec.Gate != nil {
		if err := spec.Gate(ctx); err != nil {
			return nil, nil, err
		}
	}
	info, err := engine.Run(ctx)
	if ctx.Err() != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrAborted, ctx.Err())
	}
	if err != nil {
		return nil, nil, err
	}
	var safety Safety
	if checker != nil {
		if safety, err = checker.Safety(ctx); err != nil {
			return nil, nil, fmt.Errorf("loadgen: safety audit: %w", err)
		}
	}
	if err := w.Finish(info, safety); err != nil {
		return nil, nil, err
	}
	if spec.FaultLog != "" {
		if err := copyFaults(spec.FaultLog, spec.Out, info.Start, info.End); err != nil {
			return nil, nil, err
		}
	}
	r, err := LoadReport(spec.Out)
	if err != nil {
		return nil, nil, err
	}
	failed := r.Judge(spec.Thresholds)
	if err := r.Write(); err != nil {
		return r, failed, err
	}
	return r, failed, nil
}

// copyFaults appends to the run directory dir's fault log the faults of the
// log at src that were in force at some time in [from, to].
func copyFaults(src, dir string, from, to time.Time) error {
	faults, err := faultlog.Read(src)
	if err != nil {
		return fmt.Errorf("loadgen: the lab's faults: %w", err)
	}
	var evs []faultlog.Event
	for _, f := range faults {
		if f.Start.After(to) || (!f.Active() && f.End.Before(from)) {
			continue
		}
		evs = append(evs, f.Events()...)
	}
	if err := faultlog.Append(filepath.Join(dir, FaultsFile), evs...); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	return nil
}

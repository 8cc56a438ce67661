package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/loadgen"
)

func init() {
	register(command{name: "sweep", summary: "find the knee: load steps at rising rates against an SLO", run: runSweep})
}

// ratesFlag is --rates: 500,1000,2000.
type ratesFlag []float64

func (f *ratesFlag) String() string {
	parts := make([]string, len(*f))
	for i, r := range *f {
		parts[i] = strconv.FormatFloat(r, 'f', -1, 64)
	}
	return strings.Join(parts, ",")
}
func (f *ratesFlag) Type() string { return "RATE,RATE,..." }
func (f *ratesFlag) Set(s string) error {
	r, err := loadgen.ParseRates(s)
	if err != nil {
		return err
	}
	*f = r
	return nil
}

// sweepOptions are the parsed flags of `redlab sweep`.
type sweepOptions struct {
	loadFlags
	rates     ratesFlag
	step      time.Duration
	slo       thresholdsFlag
	keepGoing bool
	maxLate   float64
	args      []string
}

func parseSweep(e *env, args []string) (*sweepOptions, error) {
	fs := pflag.NewFlagSet("sweep", pflag.ContinueOnError)
	fs.SetOutput(e.stderr)
	o := &sweepOptions{args: args}
	o.register(fs, filepath.Join("runs", "sweep-"+time.Now().Format("20060102-150405")))
	fs.Var(&o.rates, "rates", "offered rates of the steps, rising: 500,1000,2000,4000,8000")
	fs.DurationVar(&o.step, "step-duration", 30*time.Second, "how long each step runs")
	fs.Var(&o.slo, "slo", "condition every step must meet, repeatable, like --threshold: 'acquire.p99<10ms'")
	fs.BoolVar(&o.keepGoing, "keep-going", false, "run every rate; by default the sweep stops at the first step that misses the SLO")
	fs.Float64Var(&o.maxLate, "max-late", 1, "a step also misses when more than this percentage of its operations could not be sent on time")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: redlab sweep --rates 500,1000,2000 --step-duration 30s --slo 'acquire.p99<10ms' [load flags]")
		fmt.Fprintln(e.stderr, "\nRuns one load step per rate (each a full run directory under --out) and reports the knee:")
		fmt.Fprintln(e.stderr, "the highest rate that met the SLO, as a table and a chart in --out/report.html.")
		fmt.Fprintln(e.stderr, "Exit 0 when some rate met the SLO, 99 when none did, 1 failure, 2 usage error.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if len(o.rates) == 0 {
		return nil, errors.New("--rates is required")
	}
	if len(o.slo) == 0 {
		return nil, errors.New("--slo is required: what must a rate meet to count as sustained?")
	}
	if o.step <= 0 {
		return nil, fmt.Errorf("--step-duration must be positive, got %v", o.step)
	}
	if o.maxLate < 0 || o.maxLate > 100 {
		return nil, fmt.Errorf("--max-late must be a percentage 0..100, got %v", o.maxLate)
	}
	if err := o.validate(fs); err != nil {
		return nil, err
	}
	return o, nil
}

func runSweep(ctx context.Context, e *env, args []string) int {
	o, err := parseSweep(e, args)
	return startLoad(ctx, e, "sweep", err, func(ctx context.Context, stop <-chan struct{}) int {
		return o.run(ctx, e, stop)
	})
}

func (o *sweepOptions) run(ctx context.Context, e *env, stop <-chan struct{}) int {
	fail := func(err error) int {
		fmt.Fprintf(e.stderr, "redlab sweep: %v\n", err)
		return exitFailure
	}
	// One target for every step: each step re-seeds the stock and starts a
	// fresh double-grant check, so steps are audited separately.
	rig, err := o.setUp(ctx, e)
	if err != nil {
		return fail(err)
	}
	defer rig.close()
	step := func(ctx context.Context, rate float64, dir string) (*loadgen.Report, error) {
		profile := []loadgen.Stage{{Duration: o.step, Rate: rate}}
		sched, err := loadgen.NewSchedule(profile, rig.shard)
		if err != nil {
			return nil, err
		}
		r, _, err := loadgen.Execute(ctx, o.runSpec(rig, dir, profile, sched, append([]string{"sweep"}, o.args...), o.slo, stop))
		return r, err
	}
	sw, err := loadgen.RunSweep(ctx, loadgen.SweepSpec{
		Out: o.out, Rates: o.rates, SLO: o.slo, MaxLateRatio: o.maxLate / 100, KeepGoing: o.keepGoing,
		Step: step, Log: e.stderr,
	}, stop)
	if err != nil {
		return fail(err)
	}
	_ = sw.WriteText(e.stdout)
	fmt.Fprintf(e.stdout, "report: %s\n", filepath.Join(o.out, loadgen.HTMLFile))
	if sw.Knee == 0 {
		fmt.Fprintln(e.stderr, "redlab sweep: no rate met the SLO")
		return exitThreshold
	}
	return exitOK
}

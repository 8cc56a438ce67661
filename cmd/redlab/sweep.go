package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/loadgen"
)

// sweepOptions are the flags of `redlab sweep`.
type sweepOptions struct {
	loadFlags
	rates     ratesFlag
	step      time.Duration
	slo       thresholdsFlag
	keepGoing bool
	untilMiss bool
	growth    float64
	maxRate   float64
	refine    bool
	maxLate   float64
	args      []string // the command line, for run.json
}

func newSweepCmd(e *env) *cobra.Command {
	o := &sweepOptions{}
	c := &cobra.Command{
		Use:   "sweep",
		Short: "find the knee: load steps at rising rates against an SLO",
		Long: `Runs one load step per rate (each a full run directory under --out) and
reports the knee: the highest rate that met the SLO, as a table and a chart
in --out/report.html. Takes every flag of 'redlab load' but the profile and
thresholds.

With --until-miss the sweep goes on past the last rate while every step
meets the SLO, each step --growth times the one before, until one misses
(or the next would pass --max-rate): the knee is then a measured limit, not
the top of the list. With --refine one more step runs between the knee and
the first miss above it.

Exit 0 when some rate met the SLO, 99 when none did, 1 failure, 2 usage error.`,
		Example: `  redlab sweep --rates 500,1000,2000,4000 --step-duration 30s --slo 'acquire.p99<10ms'
  redlab sweep --rates 100,200,400 --until-miss --refine --step-duration 20s --slo 'acquire.p99<10ms'`,
		RunE: func(c *cobra.Command, _ []string) error {
			o.args = e.args
			if err := o.validate(c.Flags()); err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			return interruptible(c.Context(), e, "sweep", func(ctx context.Context, stop <-chan struct{}) error {
				return o.run(ctx, e, stop)
			})
		},
	}
	fs := c.Flags()
	o.register(fs, filepath.Join("runs", "sweep-"+time.Now().Format("20060102-150405")))
	fs.Var(&o.rates, "rates", "offered rates of the steps, rising: 500,1000,2000,4000,8000 (required)")
	fs.DurationVar(&o.step, "step-duration", 30*time.Second, "how long each step runs")
	fs.Var(&o.slo, "slo", "condition every step must meet, repeatable, like --threshold: 'acquire.p99<10ms' (required)")
	fs.BoolVar(&o.keepGoing, "keep-going", false, "run every rate; by default the sweep stops at the first step that misses the SLO")
	fs.BoolVar(&o.untilMiss, "until-miss", false, "go on past the last rate, --growth times each step, until a step misses the SLO")
	fs.Float64Var(&o.growth, "growth", 2, "with --until-miss: each further rate is this many times the one before")
	fs.Float64Var(&o.maxRate, "max-rate", 0, "with --until-miss: never beyond this rate (0: no bound)")
	fs.BoolVar(&o.refine, "refine", false, "after the first miss, one more step halfway between it and the knee")
	fs.Float64Var(&o.maxLate, "max-late", 1, "a step also misses when more than this percentage of its operations could not be sent on time")
	return c
}

func (o *sweepOptions) validate(fs *pflag.FlagSet) error {
	switch {
	case len(o.rates) == 0:
		return errors.New("--rates is required")
	case len(o.slo) == 0:
		return errors.New("--slo is required: what must a rate meet to count as sustained?")
	case o.step <= 0:
		return fmt.Errorf("--step-duration must be positive, got %v", o.step)
	case o.maxLate < 0 || o.maxLate > 100:
		return fmt.Errorf("--max-late must be a percentage 0..100, got %v", o.maxLate)
	case o.keepGoing && (o.untilMiss || o.refine):
		return errors.New("--keep-going runs every listed rate: --until-miss and --refine stop at a miss")
	case o.growth <= 1:
		return fmt.Errorf("--growth must be more than 1, got %v", o.growth)
	case o.maxRate < 0:
		return fmt.Errorf("--max-rate must not be negative, got %v", o.maxRate)
	case (fs.Changed("growth") || fs.Changed("max-rate")) && !o.untilMiss:
		return errors.New("--growth and --max-rate go with --until-miss")
	}
	return o.loadFlags.validate(fs, "--slo", o.slo)
}

func (o *sweepOptions) run(ctx context.Context, e *env, stop <-chan struct{}) error {
	// One target for every step: each step re-seeds the stock and starts a
	// fresh double-grant check, so steps are audited separately.
	rig, err := o.setUp(ctx, e, true)
	if err != nil {
		return err
	}
	defer rig.close()
	step := func(ctx context.Context, rate float64, dir string) (*loadgen.Report, error) {
		profile := []loadgen.Stage{{Duration: o.step, Rate: rate}}
		sched, err := loadgen.NewSchedule(profile, rig.shard)
		if err != nil {
			return nil, err
		}
		r, _, err := loadgen.Execute(ctx, o.runSpec(rig, dir, profile, sched, o.args, o.slo, stop))
		return r, err
	}
	sw, err := loadgen.RunSweep(ctx, loadgen.SweepSpec{
		Out: o.out, Rates: o.rates, SLO: o.slo, MaxLateRatio: o.maxLate / 100, KeepGoing: o.keepGoing,
		UntilMiss: o.untilMiss, Growth: o.growth, MaxRate: o.maxRate, Refine: o.refine,
		Step: step, Log: e.stderr,
	}, stop)
	if err != nil {
		return err
	}
	if err := sw.WriteText(e.stdout); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "report: %s\n", filepath.Join(o.out, loadgen.HTMLFile))
	if sw.Knee == 0 {
		return thresholdErrorf("no rate met the SLO")
	}
	return nil
}

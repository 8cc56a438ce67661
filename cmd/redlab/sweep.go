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

Exit 0 when some rate met the SLO, 99 when none did, 1 failure, 2 usage error.`,
		Example: `  redlab sweep --rates 500,1000,2000,4000 --step-duration 30s --slo 'acquire.p99<10ms'`,
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

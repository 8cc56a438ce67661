package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/loadgen"
)

// loadOptions are the flags of `redlab load`.
type loadOptions struct {
	loadFlags
	rate       rateFlag
	stages     stagesFlag
	duration   time.Duration
	thresholds thresholdsFlag
	profile    []loadgen.Stage // resolved by validate
	args       []string        // the command line, for run.json
}

func newLoadCmd(e *env) *cobra.Command {
	o := &loadOptions{}
	c := &cobra.Command{
		Use:   "load",
		Short: "open-loop load against the inventory service: HDR latency, safety, reports",
		Long: `Runs an open-loop schedule of reservations and writes summary.json,
latency.hlog, *.hgrm and report.html to --out. Latency is measured from each
operation's intended start. First interrupt: stop, drain, report; second:
abort. Each lock node's first request error is printed once, on stderr.

Exit 0 ok, 1 failure (also a run in which not one request was reserved),
2 usage error, 99 a threshold failed.`,
		Example: `  redlab load --rate 500 --duration 30s --keys zipf:1000:0.99 --threshold 'acquire.p99<20ms'
  redlab load --guard redlock-fenced --stages 30s:500,60s:2000,30s:0 --out runs/ramp
  redlab load --target http://a:8080,http://b:8080 --rate 1000 --duration 1m --worker 0/2`,
		RunE: func(c *cobra.Command, args []string) error {
			o.args = e.args
			if err := o.validate(c.Flags()); err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			return interruptible(c.Context(), e, "load", func(ctx context.Context, stop <-chan struct{}) error {
				return o.run(ctx, e, stop)
			})
		},
	}
	fs := c.Flags()
	o.register(fs, filepath.Join("runs", "load-"+time.Now().Format("20060102-150405")))
	fs.Var(&o.rate, "rate", "operations per second (500) or per period (50/100ms), with --duration")
	fs.DurationVar(&o.duration, "duration", 0, "how long --rate runs")
	fs.Var(&o.stages, "stages", "ramp profile instead of --rate/--duration: 30s:500,60s:2000,30s:0 (each stage ramps linearly from the previous rate)")
	fs.Var(&o.thresholds, "threshold", "pass/fail condition, repeatable: 'acquire.p99<20ms', 'node1.p99<5ms', 'safety.lost_updates==0', 'outcomes.error<1%', 'throughput>=500'")
	return c
}

func (o *loadOptions) validate(fs *pflag.FlagSet) error {
	switch {
	case len(o.stages) > 0 && (fs.Changed("rate") || fs.Changed("duration")):
		return errors.New("give either --stages or --rate with --duration, not both")
	case len(o.stages) > 0:
		o.profile = o.stages
	case !fs.Changed("rate") || o.duration <= 0:
		return errors.New("--rate and a positive --duration are required (or --stages)")
	case o.rate.v <= 0:
		return fmt.Errorf("--rate must be positive, got %v", o.rate.v)
	default:
		o.profile = []loadgen.Stage{{Duration: o.duration, Rate: o.rate.v}}
	}
	return o.loadFlags.validate(fs, "--threshold", o.thresholds)
}

func (o *loadOptions) run(ctx context.Context, e *env, stop <-chan struct{}) error {
	sched, err := loadgen.NewSchedule(o.profile, loadgen.Shard(o.worker))
	if err != nil {
		return err
	}
	rig, err := o.setUp(ctx, e, false)
	if err != nil {
		return err
	}
	defer rig.close()
	if _, ok := rig.target.(loadgen.Preparer); ok && rig.status != nil {
		fmt.Fprintf(e.stderr, "seeding %d SKUs with %d units each\n", rig.keys.Len(), o.stock)
	}
	r, failed, err := loadgen.Execute(ctx, o.runSpec(rig, o.out, o.profile, sched, o.args, o.thresholds, stop))
	if err != nil {
		return err
	}
	err = report(e, r, failed)
	if none := nothingReserved(r.Summary); none != nil {
		return none
	}
	return err
}

// nothingReserved fails a run (exit 1) in which requests were made and not
// one was reserved: its latencies and outcome counts describe a service
// that did not work, and a script must not read it as a measurement.
func nothingReserved(s loadgen.Summary) error {
	if s.Requests == 0 || s.Outcomes[loadgen.Reserved.String()] > 0 {
		return nil
	}
	var ended []string
	for _, name := range loadgen.OutcomeNames() {
		if c := s.Outcomes[name]; c > 0 {
			ended = append(ended, fmt.Sprintf("%s %d", name, c))
		}
	}
	return &exitError{code: exitFailure, err: fmt.Errorf("nothing reserved: 0 of %d requests (%s)", s.Requests, strings.Join(ended, ", "))}
}

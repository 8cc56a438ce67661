package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redlocklab/redlocklab/drill/explore"
	"github.com/redlocklab/redlocklab/drill/spec"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/inventory"
)

func newExploreCmd(e *env) *cobra.Command {
	cfg := explore.DefaultConfig()
	var (
		seed     uint64
		faults   string
		labText  string
		guards   string
		merge    []string
		machines bool
		noShrink bool
		verbose  bool
		unavail  percentFlag
		ho       = &drillHostsOptions{}
	)
	unavail = percentFlag(cfg.Unavailable)
	c := &cobra.Command{
		Use:   "explore [--seed N] [--budget 10m] [--faults LIST] [--lab '{...}']",
		Short: "search random fault schedules against every guard at once: rates per guard, each failure shrunk to a runbook",
		Long: `Draws seeded random fault schedules from the fault catalogue (kinds,
targets: one node, a minority, a majority, the etcd leader, a lock holder;
times, durations, parameters) and runs each against every guard at once on
one lab, which serves every schedule: between two schedules it is healed,
its restart delays waited out, its keys and stores cleared, and proved clean
(a schedule that finds it unclean is discarded and counted).

With --hosts the schedules run on the hosts of an inventory over SSH (a lab
of machines with --ssh, or real VMs in a drill environment), every fault
behind its dead-man switch, healed between schedules, the keys waited out;
the hosts must run the rules --lab gives (no host is weakened: weaken them
first with 'redlab hosts weaken' to search weaker rules). The etcd guards are
left out (an inventory lists no etcd member), and so is the clock family (a
real step of the host's clock there) unless --faults names it.

Each schedule is a drill spec (OUT/specs/<schedule>.md): anything found
replays with 'redlab drill'. A schedule is judged by the drill's checkers:
double grants and lock violations from the history, lost updates from each
store's audit, and each SKU's stock replayed as a register with Porcupine
(the two must agree; history.html shows a history that is not
linearizable). A schedule whose load before its first fault fell below 90%
of its rate is INVALID, not judged.

The answer is a rate: per guard, the judged schedules with lock violations,
double grants, lost updates and unavailability above --unavailable, with a
95% interval, in explore.json (which --merge adds up across runs and
machines) and report.html.

Each fault family implies states the search must reach at least once (a
crash under a live lock, a lost quorum, Redlock breaking when the rules are
broken...): a run that reaches none is inconclusive.

Then every failing schedule (a guard that lost its lock or its data) is
shrunk: fewer guards, fewer, shorter faults on fewer targets, each candidate
replayed --shrink-runs times and kept when it fails in --shrink-share of
them. The result is a runbook in --found; 'redlab drill FILE --repeat 5'
replays it and says how often it reproduced.

The schedule's load: 20 reservations/s per guard for 10s, a 2s lock TTL,
holds of 200ms-1.5s, 32 SKUs per guard (a lock lost under its holder has
a waiter to take it) whose stock runs out near the end.

Exit 0 a conclusive search, 1 it could not run or its checkers disagreed,
2 usage error, 3 inconclusive or mostly invalid.`,
		Example: `  redlab explore --seed 7 --budget 10m
  redlab explore --seed 7 --lab '{persistence: everysec, restart_delay: 0s}' --faults power,crash
  redlab explore --seed 7 --faults latency --schedules 20        # inconclusive: latency breaks nothing
  redlab explore --merge runs/explore-a/explore.json,runs/explore-b/explore.json --out runs/explore-all`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fs := c.Flags()
			if len(merge) > 0 {
				for _, name := range []string{"seed", "faults", "lab", "guards", "schedules", "budget"} {
					if fs.Changed(name) {
						return usageErrorf("--merge adds up finished searches: --%s does not apply", name)
					}
				}
				return mergeExplore(e, merge, cfg.Out)
			}
			var err error
			if fs.Changed("faults") {
				if cfg.Families, err = explore.ParseFamilies(faults); err != nil {
					return usageErrorf("--faults: %v", strings.TrimPrefix(err.Error(), "explore: "))
				}
			}
			if fs.Changed("guards") {
				cfg.Guards = nil
				for _, name := range strings.Split(guards, ",") {
					g, err := inventory.ParseAnyGuard(strings.TrimSpace(name))
					if err != nil {
						return usageErrorf("--guards: %v", err)
					}
					cfg.Guards = append(cfg.Guards, g)
				}
			}
			if fs.Changed("lab") {
				if cfg.Lab, err = spec.ParseLab("--lab", labText, cfg.Lab); err != nil {
					return usageErrorf("%v", err)
				}
			}
			if !fs.Changed("seed") {
				seed = rand.Uint64N(1<<31) + 1
			}
			cfg.Seed = seed
			cfg.Shrink = !noShrink
			cfg.Unavailable = float64(unavail)
			cfg.Commit = recordedCommit()
			cfg.Log = e.stderr
			if verbose {
				cfg.Drill.Log = e.stderr
			}
			if machines {
				cfg.Target = fault.MachineNode
				cfg.Lab.Machines = true
				cfg.Drill.Lab.Machines = true
			}
			if ho.file != "" {
				if machines {
					return usageErrorf("--hosts runs on real hosts: --machines is for the lab")
				}
				if cfg.Drill.Hosts, err = ho.hostsConfig(e); err != nil {
					return err
				}
				if !fs.Changed("faults") {
					cfg.Families = slices.Clone(explore.DefaultHostFamilies)
				}
			}
			if cfg.Budget <= 0 && cfg.MaxSchedules <= 0 {
				return usageErrorf("--budget and --schedules are both 0: the search would never end")
			}
			if err := cfg.Prepare(); err != nil {
				var pe *profile.Error
				if errors.As(err, &pe) {
					return usageErrorf("--lab: %s: %s", pe.Field, pe.Rule)
				}
				return usageErrorf("%v", strings.TrimPrefix(err.Error(), "explore: "))
			}
			if _, err := os.Stat(filepath.Join(cfg.Out, explore.ResultFile)); err == nil {
				return usageErrorf("--out %s already holds a search (%s): choose a new --out", cfg.Out, explore.ResultFile)
			}
			ctx, cancel := cancelOnSignal(c.Context(), e)
			defer cancel()
			return runExplore(ctx, e, cfg)
		},
	}
	f := c.Flags()
	f.Uint64Var(&seed, "seed", 0, "the seed that draws every schedule (default: a random one, printed): the same seed and flags draw the same schedules")
	f.DurationVar(&cfg.Budget, "budget", 10*time.Minute, "how long to search (shrinking comes after, within --shrink-budget)")
	f.IntVar(&cfg.MaxSchedules, "schedules", 0, "stop after this many schedules (0: when --budget ends)")
	f.StringVar(&faults, "faults", strings.Join(explore.DefaultFamilies, ","), "fault families to draw from, of "+strings.Join(explore.FamilyNames(), ", "))
	f.StringVar(&labText, "lab", "", "the operating rules, as a drill spec's lab: block: '{persistence: everysec, restart_delay: 0s}' (default: fsync always, restart delay 3s, the TTL plus a second); etcd members and the power-loss filesystem are added as the guards and families need")
	f.StringVar(&guards, "guards", joinGuardNames(cfg.Guards), "guards every schedule runs at once")
	f.StringVar(&cfg.Out, "out", "runs/explore", "directory for explore.json, report.html, specs/ and schedules/ (must not hold another run)")
	f.StringVar(&cfg.Found, "found", cfg.Found, "directory for the shrunk runbooks")
	f.BoolVar(&noShrink, "no-shrink", false, "do not shrink the failing schedules")
	f.IntVar(&cfg.ShrinkRuns, "shrink-runs", cfg.ShrinkRuns, "replays of each shrinking candidate")
	f.Float64Var(&cfg.ShrinkShare, "shrink-share", cfg.ShrinkShare, "share of a candidate's replays that must fail the same way for it to be kept")
	f.DurationVar(&cfg.ShrinkBudget, "shrink-budget", cfg.ShrinkBudget, "how long shrinking may take in all")
	f.BoolVarP(&verbose, "verbose", "v", false, "also show each schedule's drill log: the lab, the load, every fault as it is applied")
	f.BoolVar(&cfg.Keep, "keep", false, "keep every schedule's whole directory (default: only the failing ones')")
	f.Var(&unavail, "unavailable", "share of a guard's requests found unavailable above which a schedule counts as unavailable for it, like 5%")
	f.BoolVar(&machines, "machines", false, "run on a lab of systemd-nspawn machines (the families a machine cannot apply are refused)")
	addDrillHostsFlags(f, ho)
	f.StringSliceVar(&merge, "merge", nil, "add up finished searches (their explore.json, comma-separated or repeated) into --out, and print the merged rates")
	return c
}

func joinGuardNames(gs []inventory.Guard) string {
	s := make([]string, len(gs))
	for i, g := range gs {
		s[i] = string(g)
	}
	return strings.Join(s, ",")
}

// runExplore runs the search and prints its summary; the exit code says
// whether it stands.
func runExplore(ctx context.Context, e *env, cfg explore.Config) error {
	res, err := explore.Run(ctx, cfg)
	if res != nil {
		fmt.Fprintln(e.stdout)
		if werr := res.WriteText(e.stdout); werr != nil && err == nil {
			err = werr
		}
		fmt.Fprintf(e.stdout, "\nexplore.json, report.html: %s\n", cfg.Out)
	}
	if err != nil {
		return err
	}
	switch {
	case res.Disagreements > 0:
		return errors.New(res.Problem())
	case res.Problem() != "":
		return &exitError{code: exitInvalid, err: errors.New(res.Problem())}
	}
	return nil
}

// mergeExplore adds up finished searches.
func mergeExplore(e *env, files []string, out string) error {
	var runs []*explore.Result
	for _, f := range files {
		if filepath.Base(f) != explore.ResultFile {
			f = filepath.Join(f, explore.ResultFile)
		}
		r, err := explore.ReadResult(f)
		if err != nil {
			return usageErrorf("--merge: %v", err)
		}
		runs = append(runs, r)
	}
	m, err := explore.Merge(runs...)
	if err != nil {
		return usageErrorf("--merge: %v", err)
	}
	if err := m.WriteTo(out); err != nil {
		return err
	}
	if err := m.WriteText(e.stdout); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\nexplore.json, report.html: %s\n", out)
	return nil
}

// percentFlag is a share given as 5% or 0.05.
type percentFlag float64

func (p *percentFlag) String() string { return fmt.Sprintf("%g%%", float64(*p)*100) }
func (p *percentFlag) Type() string   { return "SHARE" }
func (p *percentFlag) Set(s string) error {
	var v float64
	if t, ok := strings.CutSuffix(strings.TrimSpace(s), "%"); ok {
		if _, err := fmt.Sscanf(t, "%g", &v); err != nil {
			return fmt.Errorf("want a share like 5%% or 0.05, got %q", s)
		}
		v /= 100
	} else if _, err := fmt.Sscanf(s, "%g", &v); err != nil {
		return fmt.Errorf("want a share like 5%% or 0.05, got %q", s)
	}
	if v < 0 || v >= 1 {
		return fmt.Errorf("want a share from 0 to under 100%%, got %q", s)
	}
	*p = percentFlag(v)
	return nil
}

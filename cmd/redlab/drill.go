package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/redlocklab/redlocklab/drill"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/inventory"
)

func newDrillCmd(e *env) *cobra.Command {
	var (
		out        string
		matrix     string
		seed       uint64
		monitoring bool
		machines   bool
		check      bool
		repeat     int
		mcfg       = lab.MonitoringConfig{ScrapeInterval: time.Second, AlertForMax: 5 * time.Second}
		ho         = &drillHostsOptions{}
	)
	c := &cobra.Command{
		Use:   "drill FILE... | --matrix DIR",
		Short: "run executable runbooks: lab, load, faults on schedule, counts checked against expectations",
		Long: `Runs each drill (a runbook under runbooks/drills/ whose YAML front matter is
the spec): brings a lab up with the drill's profile, starts every guard's load
at once on it, injects the faults on schedule, heals, drains, counts double
grants and lock violations from the recorded history, audits each guard's
store, and checks every expectation in both directions. The lab goes down
afterwards, also on error or interrupt.

Each drill writes OUT/<drill>/: result.json (the verdict and counts),
history.jsonl (every lock tenure and fault event), faults.jsonl (the lab's
fault log) and one load run directory per guard (<guard>/run/report.html).

With --matrix DIR every *.md in DIR runs, and OUT gets matrix.md,
matrix.json and matrix.html: drills × guards.

With --machines (or 'machines: true' in a drill's lab:) the nodes are
systemd-nspawn machines booted from the module's user data (see 'redlab lab
up --machines'); drills with faults a machine cannot apply (clock-jump,
clock-rate, failover, restart with a delay) are refused before any runs, and
a drill's etcd members, which run next to process nodes only, are left out
with their guards and the faults on them (a drill about etcd is refused).

With --monitoring the lab also runs its exporters and Prometheus (as 'lab up
--monitoring'), every guard's metrics are scraped, and Prometheus keeps its
data in OUT/<drill>/prometheus/data, which outlives the lab: serve it again
with OUT/<drill>/prometheus/view.yml (the command is in that file) and the
dashboards of dashboards/grafana show the drill.

Every spec is read before anything starts: a spec error is a usage error
naming the file, the line and the field. With --check the specs are only read
and validated, with the same messages, and nothing runs: a lint for runbooks
in a CI of your own. With --check and --hosts every spec is also checked
against the hosts inventory, and a table says which run over SSH (and which
guards they leave out) and why the others do not.

Before its first fault a drill checks that the host kept its schedule: every
guard served at least 90% of the operations due, sent on time and answered by
the service. If not, the drill ends INVALID: the host was too busy to run it,
which says nothing of the lock; it is neither passed nor failed.

Exit 0 every expectation held, 1 one did not (each is named) or a drill could
not run, 2 usage or spec error, 3 a drill was INVALID and none failed.`,
		Example: `  redlab drill runbooks/drills/power-loss-everysec-no-delay.md
  redlab drill --matrix runbooks/drills/ --out runs/drills
  redlab drill --check runbooks/drills/*.md`,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case matrix == "" && len(args) == 0:
				return usageErrorf("give drill files, or --matrix DIR")
			case matrix != "" && len(args) > 0:
				return usageErrorf("give drill files or --matrix DIR, not both")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			files := args
			if matrix != "" {
				var err error
				if files, err = drillFiles(matrix); err != nil {
					return usageErrorf("%v", err)
				}
			}
			specs := make([]*drill.Spec, 0, len(files))
			var errs []string
			for _, f := range files {
				s, err := drill.ReadFile(f)
				if err != nil {
					errs = append(errs, strings.TrimPrefix(err.Error(), "drill: "))
					continue
				}
				specs = append(specs, s)
			}
			if len(errs) > 0 {
				return usageErrorf("%d invalid drill spec(s):\n  %s", len(errs), strings.Join(errs, "\n  "))
			}
			if err := uniqueNames(specs); err != nil {
				return usageErrorf("%v", err)
			}
			if machines {
				for _, s := range specs {
					if err := drill.CheckMachines(s); err != nil {
						return usageErrorf("--machines: %v", err)
					}
				}
			}
			if check && ho.file != "" {
				if err := hostsLabFlags(monitoring, machines); err != nil {
					return err
				}
				return ho.checkHosts(e.stdout, specs)
			}
			hostsCfg, err := ho.config(e, specs, monitoring, machines)
			if err != nil {
				return err
			}
			if check {
				fmt.Fprintf(e.stdout, "%d drill spec(s) valid\n", len(specs))
				return nil
			}
			if !monitoring && (c.Flags().Changed("scrape-interval") || c.Flags().Changed("alert-for-max")) {
				return usageErrorf("--scrape-interval and --alert-for-max configure --monitoring")
			}
			if d := mcfg.ScrapeInterval; d < 100*time.Millisecond || d%time.Millisecond != 0 {
				return usageErrorf("--scrape-interval %v: want a whole number of milliseconds, at least 100ms", d)
			}
			if d := mcfg.AlertForMax; d < 0 || d%time.Millisecond != 0 {
				return usageErrorf("--alert-for-max %v: want 0 or a whole number of milliseconds", d)
			}
			opts := drill.Options{Out: out, Log: e.stderr, Hosts: hostsCfg}
			opts.Lab.Machines = machines
			if monitoring {
				opts.Monitoring = &mcfg
			}
			if c.Flags().Changed("seed") {
				opts.Seed, opts.SeedSet = seed, true
			}
			if repeat < 1 {
				return usageErrorf("--repeat %d: want at least 1", repeat)
			}
			if repeat > 1 && matrix != "" {
				return usageErrorf("--repeat replays drill files, not a --matrix")
			}
			ctx, cancel := cancelOnSignal(c.Context(), e)
			defer cancel()
			if repeat > 1 {
				return repeatDrills(ctx, e, specs, opts, repeat)
			}
			return runDrills(ctx, e, specs, opts, matrix != "")
		},
	}
	addDrillHostsFlags(c.Flags(), ho)
	c.Flags().StringVar(&out, "out", "runs/drills", "directory for the drills' results (OUT/<drill>/); an earlier run of a drill there is replaced")
	c.Flags().StringVar(&matrix, "matrix", "", "run every drill in this directory and write matrix.md, matrix.json and matrix.html into --out")
	c.Flags().Uint64Var(&seed, "seed", 0, "seed for every drill's key and quantity draws (default: each spec's workload.seed)")
	c.Flags().BoolVar(&machines, "machines", false, "run every drill on a lab of systemd-nspawn machines (lab up --machines: real systemd, chrony and restart guard; needs root) instead of processes; a drill's own 'lab: {machines: true}' asks for it too")
	c.Flags().IntVar(&repeat, "repeat", 1, "replay each drill this many times, on one lab, and print how many reproduced its expectations (\"reproduced k/N\"): exit 0 when at least one did, 1 when none")
	c.Flags().BoolVar(&check, "check", false, "only read and validate the specs (exit 0 valid, 2 with each error's file, line and field); no lab, no load")
	c.Flags().BoolVar(&monitoring, "monitoring", false, "run the lab's exporters and Prometheus during each drill and keep Prometheus's data in OUT/<drill>/prometheus")
	c.Flags().DurationVar(&mcfg.ScrapeInterval, "scrape-interval", mcfg.ScrapeInterval, "with --monitoring: scrape and rule evaluation interval")
	c.Flags().DurationVar(&mcfg.AlertForMax, "alert-for-max", mcfg.AlertForMax, "with --monitoring: cap every alert's 'for:' (a drill's faults last seconds; 0 keeps the rules as written)")
	return c
}

// drillFiles lists the runbooks of a directory, in name order.
func drillFiles(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		if _, serr := os.Stat(dir); serr != nil {
			return nil, fmt.Errorf("--matrix %s: %w", dir, serr)
		}
		return nil, fmt.Errorf("--matrix %s: no *.md drill in it", dir)
	}
	sort.Strings(files)
	return files, nil
}

func uniqueNames(specs []*drill.Spec) error {
	seen := map[string]string{}
	for _, s := range specs {
		if prev, ok := seen[s.Name]; ok {
			return fmt.Errorf("drill %s is given twice (%s and %s)", s.Name, prev, s.File)
		}
		seen[s.Name] = s.File
	}
	return nil
}

// runDrills runs the drills one after another; with matrix set it writes the
// matrix after each, so an interrupted matrix keeps what ran.
func runDrills(ctx context.Context, e *env, specs []*drill.Spec, opts drill.Options, matrix bool) error {
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return err
	}
	m := drill.NewMatrix(specs)
	began := time.Now()
	var failed, broken, invalid []string
	for _, s := range specs {
		start := time.Now()
		res, err := drill.Run(ctx, s, opts)
		m.Add(s, res, err, time.Since(start))
		m.TookS = time.Since(began).Seconds()
		if matrix {
			if werr := m.Write(opts.Out); werr != nil {
				return werr
			}
		}
		if err != nil {
			broken = append(broken, fmt.Sprintf("%s: %v", s.Name, err))
			fmt.Fprintf(e.stdout, "drill %s: DID NOT RUN: %v\n\n", s.Name, err)
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted during drill %s: the lab was taken down", s.Name)
			}
			continue
		}
		printResult(e.stdout, res, filepath.Join(opts.Out, s.Name))
		if res.Invalid != "" {
			invalid = append(invalid, fmt.Sprintf("%s: %s", s.Name, res.Invalid))
			continue
		}
		for _, f := range res.Failures() {
			failed = append(failed, fmt.Sprintf("%s: %s", s.Name, f))
		}
	}
	if matrix {
		fmt.Fprintf(e.stdout, "matrix: %s (%s, %s); coverage: %s\n", filepath.Join(opts.Out, drill.MatrixMarkdown), drill.MatrixHTML, drill.MatrixJSON, m.Coverage)
	}
	if len(failed)+len(broken) == 0 {
		if len(invalid) > 0 {
			return &exitError{code: exitInvalid, err: fmt.Errorf("%d drill(s) INVALID, not judged:\n  %s", len(invalid), strings.Join(invalid, "\n  "))}
		}
		return nil
	}
	var b strings.Builder
	if len(failed) > 0 {
		fmt.Fprintf(&b, "%d expectation(s) did not hold:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	if len(broken) > 0 {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%d drill(s) did not run:\n  %s", len(broken), strings.Join(broken, "\n  "))
	}
	if len(invalid) > 0 {
		fmt.Fprintf(&b, "\n%d drill(s) INVALID, not judged:\n  %s", len(invalid), strings.Join(invalid, "\n  "))
	}
	return errors.New(b.String())
}

// modelWord is the model checker's verdict in the drill's table.
func modelWord(m *drill.Model) string {
	switch {
	case m == nil:
		return "–"
	case m.Unknown:
		return "unknown"
	case !m.Agrees:
		return "DISAGREES"
	case m.Linearizable:
		return "yes"
	}
	return "no"
}

// repeatDrills replays each drill n times, on one lab per drill (between
// two replays it is healed, cleared and proved clean: drill.Session), and
// says how often its expectations held: a found runbook's expectations are
// the failure it found, so that is how often it reproduced.
func repeatDrills(ctx context.Context, e *env, specs []*drill.Spec, opts drill.Options, n int) error {
	var failed []string
	for _, s := range specs {
		seed := s.Workload.Seed
		if opts.SeedSet {
			seed = opts.Seed
		}
		var sess *drill.Session
		if opts.Hosts == nil && opts.Monitoring == nil {
			prof := s.Lab
			prof.PowerLoss = prof.PowerLoss || s.CutsPower()
			var err error
			if sess, err = drill.NewSession(ctx, prof, opts); err != nil {
				return fmt.Errorf("drill %s: %w", s.Name, err)
			}
		}
		k, ran := 0, 0
		for i := 1; i <= n; i++ {
			dir := filepath.Join(opts.Out, fmt.Sprintf("%s-%d", s.Name, i))
			var res *drill.Result
			var err error
			if sess != nil {
				var clean drill.Clean
				if clean, err = sess.Reset(ctx); err == nil && !clean.OK() {
					err = fmt.Errorf("the lab was not clean: %s", strings.Join(clean.Problems, "; "))
				}
				if err == nil {
					res, err = sess.Run(ctx, s, dir, seed)
				}
			} else {
				o := opts
				o.Out = filepath.Join(opts.Out, fmt.Sprintf("%s-%d", s.Name, i))
				res, err = drill.Run(ctx, s, o)
			}
			if err != nil {
				fmt.Fprintf(e.stdout, "drill %s, replay %d/%d: DID NOT RUN: %v\n", s.Name, i, n, err)
				if ctx.Err() != nil {
					break
				}
				continue
			}
			if res.Invalid == "" {
				ran++
				if res.Passed {
					k++
				}
			}
			fmt.Fprintf(e.stdout, "drill %s, replay %d/%d: %s (%s)\n", s.Name, i, n, res.Verdict(), dir)
		}
		if sess != nil {
			sess.Close(ctx)
		}
		word := "Successful reproduction"
		if k == 0 {
			word = "Failed to reproduce"
			failed = append(failed, s.Name)
		}
		fmt.Fprintf(e.stdout, "drill %s: reproduced %d/%d (%d of the %d replays judged): %s\n\n", s.Name, k, n, ran, n, word)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
	if len(failed) > 0 {
		return fmt.Errorf("failed to reproduce: %s", strings.Join(failed, ", "))
	}
	return nil
}

// printResult writes a drill's verdict and counts.
func printResult(w io.Writer, r *drill.Result, dir string) {
	fmt.Fprintf(w, "drill %s: %s (seed %d) %s\n", r.Drill, r.Verdict(), r.Seed, dir)
	if r.Invalid != "" {
		fmt.Fprintf(w, "  INVALID: %s\n", r.Invalid)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "guard\trequests\treserved\tunavailable\toverloaded\tdouble grants\tlock violations\tlost updates\tfenced\tlinearizable\tavailability\tacquire p99\t")
	for _, g := range r.GuardOrder {
		gr := r.Guards[g]
		c := gr.Counts
		acquire := "-" // a guard that takes no lock has no acquire to time
		if inventory.Guard(g).TimesLock() {
			acquire = fmt.Sprintf("%.1f ms", gr.AcquireP99Ms)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%.2f%%\t%s\t\n", g, c.Requests, c.Reserved, c.Unavailable, c.Overloaded,
			c.DoubleGrants, c.LockViolations, c.LostUpdates, c.FencedRejections, modelWord(gr.Model), gr.Availability*100, acquire)
	}
	tw.Flush()
	for _, g := range r.GuardOrder {
		for _, x := range r.Guards[g].Expectations {
			mark := "held"
			if !x.Held {
				mark = "DID NOT HOLD"
			}
			fmt.Fprintf(w, "  %-14s %-48s %-12s observed %s\n", g, x.Expr, mark, x.Observed)
		}
	}
	fmt.Fprintln(w)
}

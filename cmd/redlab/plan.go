package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/drill/plan"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/infra/remote"
	"github.com/redlocklab/redlocklab/loadgen"
	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
)

// planOptions are the flags of `redlab plan`.
type planOptions struct {
	cfg      plan.Config
	rate     rateFlag
	slo      thresholdsFlag
	hold     holdFlag
	holdFrom string
	nodes    nodesFlag
	tls      tlsFlags
	login    login
	hosts    hostsOptions
	state    string
	maxRate  float64
}

func newPlanCmd(e *env) *cobra.Command {
	o := &planOptions{cfg: plan.DefaultConfig()}
	c := &cobra.Command{
		Use:   "plan --rate N --slo EXPR (--hold D | --hold-from DIR) [--nodes ADDRS | --hosts FILE]",
		Short: "measure the nodes and recommend a deployment: TTL, timeouts, restart delay, node count, headroom",
		Long: `Measures what a Redlock deployment's settings depend on, and only that, then
recommends each setting with the rule it follows and the measurement it
stands on:

  measured: round trips to every node; each data disk's fsyncs per second and
  latency (the lab's disk, or each host's over SSH); the nodes' clock offsets
  and their NTP discipline (chronyc, over SSH); the doctor's audit; and a
  sweep to the knee under the SLO (doubling past the target until a step
  misses, then one step between).

  recommended: the TTL (from the hold-time tail and the validity margin), the
  per-node timeout, the retry backoff, the drift factor, the restart delay
  and the unit's setting for it, appendfsync, the node count (3, 5 or 7, with
  the faults each tolerates), the headroom from the knee and from the disk,
  and the warnings of the doctor and of the rules.

The nodes are a running lab (the default: --state-dir, else $REDLAB_STATE_DIR,
else ./.redlab), --nodes (round trips, audit and sweep only: no disk, no
clock), or --hosts, an inventory of hosts reached over SSH as root.

The hold time is the critical section's: a distribution (--hold 5s or
uniform:2s:9s), or a load run's hold histogram (--hold-from DIR, the run
directory holding hold.hgrm).

With --verify it then runs the drills that test the recommendation (a node
lost, a slow node, a power loss with the planned restart delay, holds at
the planned TTL), each on a lab of its own or on the hosts, and two
controls that run one wrong value and must fail (a TTL of half the hold
tail; no restart delay with appendfsync everysec); every verdict is counted
again from the drill's history.jsonl.

Writes into --out: plan.md, plan.json, plan.html (the measured curves with
the chosen values marked), terraform.tfvars for infra/envs/aws, the sweep
and the verification drills.

Exit 0 the target is met (and, with --verify, the verification held), 1 the
target is not met ("does not meet", with the knee and the limiting resource:
disk, round trips or CPU), the verification did not hold, or the plan could
not be made, 2 usage error.`,
		Example: `  eval "$(redlab lab up | tail -1)"
  redlab plan --rate 300 --slo 'acquire.p99<10ms' --hold-from runs/x
  redlab plan --rate 300 --slo 'acquire.p99<10ms' --hold uniform:2s:9s --verify
  redlab plan --hosts hosts.json --rate 500 --slo 'acquire.p99<20ms' --hold 5s --ttl 15s`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := o.validate(c.Flags()); err != nil {
				return err
			}
			o.cfg.Command = "redlab " + strings.Join(e.args, " ")
			ctx, cancel := cancelOnSignal(c.Context(), e)
			defer cancel()
			site, err := o.site(ctx, e)
			if err != nil {
				return err
			}
			defer site.Close()
			if err := o.slo.checkNodes("--slo", len(site.Nodes), ""); err != nil {
				return usageErrorf("%v", err)
			}
			o.cfg.Site = site
			// The tfvars are checked with the lab's terraform and infra
			// directory when they are found; the plan says when not.
			o.cfg.Terraform, _ = lab.FindTerraform()
			o.cfg.InfraDir, _ = lab.FindInfraDir()
			if err := o.cfg.Validate(); err != nil {
				return usageErrorf("%v", strings.TrimPrefix(err.Error(), "plan: "))
			}
			return runPlan(ctx, e, o.cfg)
		},
	}
	fs := c.Flags()
	fs.Var(&o.rate, "rate", "target rate, reservations per second (required)")
	fs.Var(&o.slo, "slo", "condition the target rate must meet, repeatable, like --threshold: 'acquire.p99<10ms' (required)")
	fs.Var(&o.hold, "hold", "the critical section's hold time: D or uniform:MIN:MAX")
	fs.StringVar(&o.holdFrom, "hold-from", "", "take the hold time from this load run directory (its hold.hgrm), instead of --hold")
	fs.Var(&o.nodes, "nodes", "plan for these nodes instead of a lab (no disk or clock is measured)"+nodesUsage)
	o.tls.register(fs)
	o.login.register(fs, node.UserRedlock)
	addHostsFlags(fs, &o.hosts)
	fs.StringVar(&o.state, "state-dir", "", stateDirUsage)
	fs.IntVar(&o.cfg.Fixed.Nodes, "node-count", 0, "fix the node count (3, 5 or 7) instead of letting the plan choose")
	fs.DurationVar(&o.cfg.Fixed.TTL, "ttl", 0, "fix the lock TTL instead of letting the plan choose; the plan checks it against the hold tail")
	fs.DurationVar(&o.cfg.Sweep.Step, "step-duration", o.cfg.Sweep.Step, "how long each sweep step runs")
	fs.Float64Var(&o.maxRate, "max-rate", 0, "the sweep never goes beyond this rate (default 16 times --rate)")
	fs.BoolVar(&o.cfg.Verify, "verify", false, "run the verification drills and the wrong-value controls after the plan (several minutes: one lab per drill)")
	fs.StringVar(&o.cfg.Out, "out", filepath.Join("runs", "plan-"+time.Now().Format("20060102-150405")), "directory for the plan's files (must not hold a plan)")
	return c
}

// validate checks the flags before anything is measured.
func (o *planOptions) validate(fs *pflag.FlagSet) error {
	switch {
	case !fs.Changed("rate"):
		return usageErrorf("--rate is required: the reservations per second to plan for")
	case o.rate.v <= 0:
		return usageErrorf("--rate must be positive, got %v", o.rate.v)
	case len(o.slo) == 0:
		return usageErrorf("--slo is required: what must the rate meet? like 'acquire.p99<10ms'")
	case fs.Changed("hold") == (o.holdFrom != ""):
		return usageErrorf("give the critical section's hold time: --hold D|uniform:MIN:MAX, or --hold-from DIR (one of them)")
	case len(o.nodes.Addrs) > 0 && o.hosts.file != "":
		return usageErrorf("--nodes and --hosts name the nodes twice: give one")
	case o.state != "" && (len(o.nodes.Addrs) > 0 || o.hosts.file != ""):
		return usageErrorf("--state-dir names a lab: it does not go with --nodes or --hosts")
	case o.hosts.insecure && o.hosts.file == "":
		return usageErrorf("--insecure-ignore-host-key goes with --hosts")
	case o.maxRate < 0:
		return usageErrorf("--max-rate must not be negative, got %v", o.maxRate)
	case o.cfg.Fixed.Nodes != 0 && o.cfg.Fixed.Nodes != 3 && o.cfg.Fixed.Nodes != 5 && o.cfg.Fixed.Nodes != 7:
		return usageErrorf("--node-count %d: want 3, 5 or 7 (odd, so that a majority exists)", o.cfg.Fixed.Nodes)
	case o.cfg.Fixed.TTL < 0:
		return usageErrorf("--ttl must be positive, got %v", o.cfg.Fixed.TTL)
	}
	for _, t := range o.slo {
		if t.ParsedMetric().IsSafety() {
			return usageErrorf("--slo %q: an SLO bounds latency or outcomes; safety is what --verify checks", t.Expr)
		}
	}
	o.cfg.Target.Rate, o.cfg.Target.SLO = o.rate.v, o.slo
	o.cfg.Sweep.MaxRate = o.maxRate
	var err error
	if o.holdFrom != "" {
		o.cfg.Target.Hold, err = plan.HoldFrom(o.holdFrom)
	} else {
		o.cfg.Target.Hold, err = plan.HoldOf(loadgen.HoldSpec(o.hold))
	}
	if err != nil {
		return usageErrorf("%v", strings.TrimPrefix(err.Error(), "plan: "))
	}
	if _, err := os.Stat(filepath.Join(o.cfg.Out, plan.JSONFile)); err == nil {
		return usageErrorf("--out %s already holds a plan: choose a new --out", o.cfg.Out)
	}
	return nil
}

// site is where the nodes are: the hosts of --hosts, the nodes of --nodes,
// or the lab.
func (o *planOptions) site(ctx context.Context, e *env) (*plan.Site, error) {
	switch {
	case o.hosts.file != "":
		inv, err := hosts.Load(o.hosts.file)
		if err != nil {
			return nil, usageErrorf("--hosts: %v", err)
		}
		lock, err := o.loginFor(node.UserRedlock)
		if err != nil {
			return nil, err
		}
		audit, err := o.loginFor(node.UserMonitor)
		if err != nil {
			return nil, err
		}
		rc := remote.Config{KnownHosts: inv.KnownHosts, InsecureIgnoreHostKey: o.hosts.insecure, Warn: e.stderr}
		return plan.HostsSite(ctx, inv, rc, lock, audit)
	case len(o.nodes.Addrs) > 0:
		tlsCfg, err := o.tls.config(nodeaddr.List(o.nodes))
		if err != nil {
			return nil, err
		}
		lock, err := o.loginFor(node.UserRedlock)
		if err != nil {
			return nil, err
		}
		audit, err := o.loginFor(node.UserMonitor)
		if err != nil {
			return nil, err
		}
		return plan.NodesSite(o.nodes.Addrs, tlsCfg, lock, audit, lab.Config{}), nil
	}
	dir := stateDir(o.state)
	l, err := lab.Open(dir)
	if err != nil {
		return nil, usageErrorf("no lab at %s (%v): start one with `redlab lab up`, or give --nodes or --hosts", dir, err)
	}
	return plan.LabSite(l)
}

// loginFor is the login of role: --username with $REDLAB_PASSWORD (the
// same user for the lock and the audit), else the lab's credentials
// ($REDLAB_CREDENTIALS): its redlock user for the lock, its monitor user
// for the audit.
func (o *planOptions) loginFor(role string) (plan.Login, error) {
	l := login{username: o.login.username, role: role}
	user, password, err := l.resolve()
	if err != nil {
		return plan.Login{}, err
	}
	return plan.Login{User: user, Password: password}, nil
}

// runPlan makes the plan and says whether it meets the target.
func runPlan(ctx context.Context, e *env, cfg plan.Config) error {
	cfg.Log = e.stderr
	p, err := plan.Run(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		return err
	}
	fmt.Fprintln(e.stdout, p.Summary())
	fmt.Fprintf(e.stdout, "plan: %s (%s, %s, %s)\n", filepath.Join(cfg.Out, plan.MarkdownFile), plan.JSONFile, plan.HTMLFile, plan.TFVarsFile)
	var problems []string
	if !p.Rec.Meets {
		problems = append(problems, p.Verdict())
	}
	if p.Verify != nil && !p.Verify.Passed {
		problems = append(problems, "the verification did not hold: "+strings.Join(p.VerifyProblems(), "; "))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

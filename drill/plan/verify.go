// Verification: the drills that test the recommendation, and the
// wrong-value controls that must fail, each a drill spec written as a
// runbook (so that `redlab drill` replays it) and judged again from its
// history.jsonl.

package plan

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/drill"
	"github.com/redlocklab/redlocklab/drill/spec"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
)

// Verification is what the drills showed of the recommendation.
type Verification struct {
	Drills []DrillVerdict `json:"drills"`
	// Passed: every drill of the recommendation passed and every control
	// failed, as each must.
	Passed bool `json:"passed"`
}

// DrillVerdict is one verification drill.
type DrillVerdict struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	// Tests names the recommended values the drill puts to work.
	Tests []string `json:"tests"`
	// Control: the drill runs a wrong value (Wrong) and must fail; the
	// others run the recommendation and must pass.
	Control bool   `json:"control,omitempty"`
	Wrong   string `json:"wrong,omitempty"`
	// Runbook is the drill's spec, Dir its run, both relative to the
	// plan's directory.
	Runbook string `json:"runbook"`
	Dir     string `json:"dir"`
	// Skipped says why the drill did not run (the site cannot apply its
	// faults); Error why it could not run; Invalid why it ran but cannot
	// be judged (the host did not keep its schedule).
	Skipped string `json:"skipped,omitempty"`
	Error   string `json:"error,omitempty"`
	Invalid string `json:"invalid,omitempty"`
	// DoubleGrants and LockViolations are counted again from the
	// drill's history.jsonl.
	DoubleGrants   int64 `json:"double_grants"`
	LockViolations int64 `json:"lock_violations"`
	// Expectations are the spec's, judged with the recounted safety
	// figures (the others as the drill observed them).
	Expectations []ExpectationVerdict `json:"expectations"`
	// Held: every expectation held. OK: that is what the drill must show
	// (held for a drill of the recommendation, not for a control).
	Held bool `json:"held"`
	OK   bool `json:"ok"`
}

// ExpectationVerdict is one expectation, judged again.
type ExpectationVerdict struct {
	Expr     string `json:"expr"`
	Held     bool   `json:"held"`
	Observed string `json:"observed"`
	// FromHistory: judged on the figures recounted from history.jsonl.
	FromHistory bool `json:"from_history,omitempty"`
}

// check is one verification drill: its spec and what it tests.
type check struct {
	spec    *spec.Spec
	tests   []string
	control bool
	wrong   string
}

// Verify runs the verification drills on the site (each on a lab of its
// own, or on the hosts) and judges each from its history.
func Verify(ctx context.Context, cfg Config, p *Plan) (*Verification, error) {
	checks, err := verificationChecks(p)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cfg.Out, VerifyDir)
	if err := os.MkdirAll(filepath.Join(dir, "runbooks"), 0o755); err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	v := &Verification{Passed: true}
	for _, c := range checks {
		dv := DrillVerdict{Name: c.spec.Name, Title: c.spec.Title, Tests: c.tests, Control: c.control, Wrong: c.wrong,
			Runbook: filepath.Join(VerifyDir, "runbooks", c.spec.Name+".md"), Dir: filepath.Join(VerifyDir, c.spec.Name)}
		if err := os.WriteFile(filepath.Join(cfg.Out, dv.Runbook), spec.Format(c.spec, runbookBody(c)), 0o644); err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
		opts := cfg.Site.Drill
		opts.Out, opts.Log = dir, cfg.Log
		if why := skipReason(c.spec, opts); why != "" {
			dv.Skipped = why
			cfg.logf("verify %s: skipped: %s", c.spec.Name, why)
			v.Drills = append(v.Drills, dv)
			v.Passed = false
			continue
		}
		cfg.logf("verify %s: %s", c.spec.Name, c.spec.Title)
		res, err := drill.Run(ctx, c.spec, opts)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			dv.Error = err.Error()
		case res.Invalid != "" && !c.control:
			dv.Invalid = res.Invalid
		default:
			// A control's wrong value may itself refuse enough requests
			// for the engine to call the run INVALID (too little served
			// to judge availability): its expectations are on safety
			// alone, which the history judges whatever the load.
			dv.Invalid = res.Invalid
			if err := rejudge(&dv, c, res, filepath.Join(cfg.Out, dv.Dir)); err != nil {
				return nil, err
			}
		}
		dv.OK = dv.Error == "" && (dv.Invalid == "" || c.control) && dv.Expectations != nil && dv.Held != c.control
		v.Passed = v.Passed && dv.OK
		cfg.logf("verify %s: %s", c.spec.Name, dv.verdict())
		v.Drills = append(v.Drills, dv)
	}
	return v, nil
}

// skipReason says why a drill cannot run where opts runs it, or "".
func skipReason(s *spec.Spec, opts drill.Options) string {
	switch {
	case opts.Hosts != nil:
		if err := drill.CheckHosts(s, opts.Hosts.Inventory); err != nil {
			return strings.TrimPrefix(err.Error(), "drill: ")
		}
	case opts.Lab.Machines:
		if err := drill.CheckMachines(s); err != nil {
			return strings.TrimPrefix(err.Error(), "drill: ")
		}
	}
	return ""
}

// verdict is a drill verdict in a few words.
func (d DrillVerdict) verdict() string {
	switch {
	case d.Skipped != "":
		return "not run: " + d.Skipped
	case d.Error != "":
		return "DID NOT RUN: " + d.Error
	case d.Invalid != "" && !d.Control:
		return "INVALID: " + d.Invalid
	case d.Control && !d.Held && d.Invalid != "":
		return "failed, as a control must (its wrong value also refused too many requests for the drill to judge availability)"
	case d.Control && !d.Held:
		return "failed, as a control must"
	case d.Control:
		return "PASSED, but a control must fail: the wrong value did no harm here"
	case d.Held:
		return "passed"
	}
	return "FAILED"
}

// rejudge counts the double grants and lock violations again from the
// drill's history.jsonl and judges its expectations with them; the
// engine's own counts must agree.
func rejudge(dv *DrillVerdict, c check, res *drill.Result, dir string) error {
	f, err := os.Open(filepath.Join(dir, drill.HistoryFile))
	if err != nil {
		return fmt.Errorf("plan: %s: %w", dv.Name, err)
	}
	defer f.Close()
	recs, err := drill.ReadRecords(f)
	if err != nil {
		return fmt.Errorf("plan: %s: %w", dv.Name, err)
	}
	guard := string(inventory.GuardRedlock)
	zero := time.Unix(0, 0)
	checker := loadgen.NewHoldChecker(zero)
	for _, h := range recs.Holds {
		if h.Guard == guard {
			checker.Observe(h.Hold(func(ns int64) time.Time { return zero.Add(time.Duration(ns)) }))
		}
	}
	dv.DoubleGrants, dv.LockViolations = checker.DoubleGrants(), checker.LockViolations()
	gr, ok := res.Guards[guard]
	if !ok {
		return fmt.Errorf("plan: %s: no %s in result.json", dv.Name, guard)
	}
	if gr.Counts.DoubleGrants != dv.DoubleGrants || gr.Counts.LockViolations != dv.LockViolations {
		return fmt.Errorf("plan: %s: result.json counts %d double grants and %d lock violations, its history.jsonl %d and %d: the checker and the history disagree",
			dv.Name, gr.Counts.DoubleGrants, gr.Counts.LockViolations, dv.DoubleGrants, dv.LockViolations)
	}
	engine := map[string]drill.ExpectationResult{}
	for _, x := range gr.Expectations {
		engine[x.Expr] = x
	}
	dv.Held = true
	for _, x := range c.spec.Expect[inventory.GuardRedlock] {
		ev := ExpectationVerdict{Expr: x.Expr}
		m := x.Threshold.ParsedMetric()
		switch {
		case x.Phase == spec.PhaseAll && m.Name == "safety.double_grants":
			ev.Held, ev.Observed, ev.FromHistory = x.Threshold.Holds(float64(dv.DoubleGrants)), fmt.Sprint(dv.DoubleGrants), true
		case x.Phase == spec.PhaseAll && m.Name == "safety.lock_violations":
			ev.Held, ev.Observed, ev.FromHistory = x.Threshold.Holds(float64(dv.LockViolations)), fmt.Sprint(dv.LockViolations), true
		case res.Invalid != "":
			return fmt.Errorf("plan: %s: INVALID (%s), and %q is not judged from the history alone", dv.Name, res.Invalid, x.Expr)
		default:
			e, ok := engine[x.Expr]
			if !ok {
				return fmt.Errorf("plan: %s: expectation %q is not in result.json", dv.Name, x.Expr)
			}
			ev.Held, ev.Observed = e.Held, e.Observed
		}
		dv.Held = dv.Held && ev.Held
		dv.Expectations = append(dv.Expectations, ev)
	}
	if res.Invalid == "" && dv.Held != gr.Passed {
		return fmt.Errorf("plan: %s: judged again from history.jsonl the drill %s, result.json says %s", dv.Name, heldWord(dv.Held), heldWord(gr.Passed))
	}
	return nil
}

func heldWord(b bool) string {
	if b {
		return "passed"
	}
	return "failed"
}

// The verification drills' loads.
const (
	verifySeed    = 11
	faultAt       = 10 * time.Second
	verifyLength  = 30 * time.Second
	availableRate = 40
	powerRate     = 30
	holdRate      = 20
	// powerNodeTimeout is the least node timeout of the power drills.
	powerNodeTimeout = 250 * time.Millisecond
)

// verificationChecks are the drills for p's recommendation: a node lost
// and a slow node under the planned timeouts, a power loss of a majority
// with the planned persistence and restart delay, holds at the planned
// TTL; and the controls: the same holds under a TTL shorter than the hold
// tail, the same power loss under everysec with no restart delay.
func verificationChecks(p *Plan) ([]check, error) {
	r := p.Rec
	n := r.Nodes
	if p.Site == "hosts" {
		n = len(p.Nodes)
	}
	persist, err := profile.ParsePersistence(r.Persistence)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	planned := profile.Profile{Nodes: n, Persistence: []profile.Persistence{persist}, RestartDelay: r.RestartDelay}
	hold := p.Target.Hold.drillHold()
	acq := p.Facts.AcquireP99
	if acq == 0 {
		acq = p.Facts.SLOAcquireP99
	}
	validity := validityOf(r.TTL, acq, r.DriftFactor, r.DriftFixed)
	// A power cut harms only locks held across the node's return: the
	// power drills hold as long as the plan lets a holder (up to 90 % of
	// its validity).
	longHold := loadgen.HoldSpec{Min: (validity / 2).Round(time.Millisecond), Max: (validity * 9 / 10).Round(time.Millisecond)}
	minority := []int{n}
	majority := make([]int, 0, n/2+1)
	for i := n / 2; i < n; i++ {
		majority = append(majority, i+1)
	}
	var checks []check
	add := func(c check, exprs ...string) error {
		c.spec.Expect = map[inventory.Guard][]spec.Expectation{}
		for _, e := range exprs {
			x, err := spec.ParseExpectation(e, c.spec.Lab.Nodes)
			if err != nil {
				return fmt.Errorf("plan: %s: %w", c.spec.Name, err)
			}
			c.spec.Expect[inventory.GuardRedlock] = append(c.spec.Expect[inventory.GuardRedlock], x)
		}
		// Through the spec language: what runs is what the runbook says.
		back, err := spec.Parse(c.spec.Name+".md", spec.Format(c.spec, ""))
		if err != nil {
			return fmt.Errorf("plan: %s is not a valid drill spec: %w", c.spec.Name, err)
		}
		c.spec = back
		checks = append(checks, c)
		return nil
	}
	wl := func(rate float64, d time.Duration, keys int, h loadgen.HoldSpec, ttl time.Duration) spec.Workload {
		return spec.Workload{Guards: []inventory.Guard{inventory.GuardRedlock}, Rate: rate, Duration: d,
			Keys: loadgen.KeySpec{Kind: "uniform", N: keys}, Hold: h, Quantity: loadgen.QuantitySpec{Min: 1, Max: 1},
			LockTTL: ttl, AcquireTimeout: inventory.DefaultAcquireTimeout, NodeTimeout: r.NodeTimeout,
			Replicas: spec.DefaultReplicas, Stock: spec.DefaultStock, Seed: verifySeed}
	}
	// The power drills test the persistence and the restart delay, not the
	// timeout: their clients reach a restarted node as soon as it answers
	// (the shipped power drills' 250 ms at least). With a timeout of a few
	// tens of ms on a busy host, reconnecting clients may find the
	// restarted nodes late, which hides what the control must show.
	powerWL := func(d time.Duration) spec.Workload {
		w := wl(powerRate, d, 60, longHold, r.TTL)
		w.NodeTimeout = max(r.NodeTimeout, powerNodeTimeout)
		return w
	}
	nodeLoss := &spec.Spec{Name: "plan-node-lost", Title: fmt.Sprintf("one of %d nodes crashes: the planned quorum keeps granting", n), Lab: planned,
		Workload: wl(availableRate, verifyLength, 1000, loadgen.HoldSpec{}, r.TTL),
		Faults:   []spec.Fault{{At: faultAt, Kind: fault.Kill, Nodes: minority, Params: fault.Params{}}}}
	if err := add(check{spec: nodeLoss, tests: []string{"nodes", "node_timeout", "restart_delay"}},
		"safety.lock_violations==0", "during.outcomes.unavailable<1%", "during.outcomes.error<1%"); err != nil {
		return nil, err
	}
	slowAdd := roundUp(4*r.NodeTimeout, time.Millisecond)
	slow := &spec.Spec{Name: "plan-slow-node", Title: fmt.Sprintf("one node answers %s late, four times the planned node timeout: the quorum does not wait for it", dur(slowAdd)), Lab: planned,
		Workload: wl(availableRate, verifyLength, 1000, loadgen.HoldSpec{}, r.TTL),
		Faults: []spec.Fault{{At: faultAt, Kind: fault.Latency, Nodes: minority,
			Params: fault.Params{"add": {D: slowAdd}, fault.For: {D: 10 * time.Second}}}}}
	// Had the quorum waited for the slow node, every acquire would take at
	// least the added delay: the median stays under the node timeout and
	// the p99 under the delay.
	if err := add(check{spec: slow, tests: []string{"node_timeout"}},
		"safety.lock_violations==0", "during.outcomes.unavailable<1%",
		fmt.Sprintf("during.acquire.p50<%s", specDur(r.NodeTimeout)), fmt.Sprintf("during.acquire.p99<%s", specDur(slowAdd))); err != nil {
		return nil, err
	}
	powerLen := max(verifyLength, 2*time.Second+r.RestartDelay+10*time.Second)
	power := &spec.Spec{Name: "plan-power-loss", Title: fmt.Sprintf("%d of %d nodes lose power under appendfsync %s and wait the planned %s before rejoining", len(majority), n, r.Persistence, dur(r.RestartDelay)),
		Lab: planned, Workload: powerWL(powerLen),
		Faults: []spec.Fault{{At: 2 * time.Second, Kind: fault.PowerLoss, Nodes: majority, Params: fault.Params{}}}}
	if err := add(check{spec: power, tests: []string{"persistence", "restart_delay"}},
		"safety.lock_violations==0", "during.grants==0"); err != nil {
		return nil, err
	}
	holdLen := max(verifyLength, 3*hold.Max+inventory.DefaultAcquireTimeout)
	atTTL := &spec.Spec{Name: "plan-hold-at-ttl", Title: fmt.Sprintf("holds of %s on 4 contended keys under the planned TTL %s", hold, dur(r.TTL)), Lab: planned,
		Workload: wl(holdRate, holdLen, 4, hold, r.TTL)}
	if err := add(check{spec: atTTL, tests: []string{"ttl"}}, "safety.double_grants==0", "safety.lock_violations==0"); err != nil {
		return nil, err
	}

	// The controls: one wrong value each, everything else as planned.
	shortTTL := roundTTL(hold.Max / 2)
	short := &spec.Spec{Name: "plan-control-short-ttl", Title: fmt.Sprintf("control: the same holds under a TTL of %s, half the hold tail", dur(shortTTL)), Lab: planned,
		Workload: wl(holdRate, holdLen, 4, hold, shortTTL)}
	if err := add(check{spec: short, tests: []string{"ttl"}, control: true, wrong: fmt.Sprintf("lock_ttl %s, half the longest hold %s", dur(shortTTL), dur(hold.Max))},
		"safety.double_grants==0", "safety.lock_violations==0"); err != nil {
		return nil, err
	}
	unsafe := profile.Profile{Nodes: n, Persistence: []profile.Persistence{profile.PersistEverysec}, NoRestartDelay: true}
	cuts := []spec.Fault{
		{At: 2 * time.Second, Kind: fault.PowerLoss, Nodes: majority, Params: fault.Params{}},
		{At: 12 * time.Second, Kind: fault.PowerLoss, Nodes: firstMajority(n), Params: fault.Params{}},
		{At: 22 * time.Second, Kind: fault.PowerLoss, Nodes: spread(n), Params: fault.Params{}},
	}
	noDelay := &spec.Spec{Name: "plan-control-no-restart-delay", Title: "control: the same power losses under appendfsync everysec with no restart delay",
		Lab: unsafe, Workload: powerWL(32 * time.Second), Faults: cuts}
	if err := add(check{spec: noDelay, tests: []string{"persistence", "restart_delay"}, control: true, wrong: "appendfsync everysec and restart_delay 0s"},
		"safety.lock_violations==0"); err != nil {
		return nil, err
	}
	return checks, nil
}

// firstMajority and spread are two other majorities of n nodes: the first
// ones, and the first with the last ones.
func firstMajority(n int) []int {
	out := make([]int, 0, n/2+1)
	for i := 1; i <= n/2+1; i++ {
		out = append(out, i)
	}
	return out
}

func spread(n int) []int {
	out := []int{1}
	for i := n - n/2 + 1; i <= n; i++ {
		out = append(out, i)
	}
	return out
}

// specDur is d as a spec expectation reads it: whole milliseconds.
func specDur(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

// runbookBody is the Markdown under a verification drill's front matter.
func runbookBody(c check) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n%s.\n\n", c.spec.Name, c.spec.Title)
	if c.control {
		fmt.Fprintf(&b, "A control written by `redlab plan`: it runs one wrong value (%s), everything else as planned, and must fail: the expectations state what the plan's rule prevents.\n", c.wrong)
	} else {
		fmt.Fprintf(&b, "Written by `redlab plan` to test its recommendation (%s): it must pass.\n", strings.Join(c.tests, ", "))
	}
	if c.spec.CutsPower() {
		fmt.Fprintf(&b, "\nIts clients' node timeout is at least %v: the drill tests the persistence and the restart delay, and its clients must reach a restarted node as soon as it answers.\n", powerNodeTimeout)
	}
	b.WriteString("\nReplay it with `redlab drill` on this file.\n")
	return b.String()
}

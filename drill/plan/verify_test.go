package plan

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/drill"
	"github.com/redlocklab/redlocklab/drill/spec"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
)

// labPlan is a plan of the lab's facts, as newPlan makes it.
func labPlan(t *testing.T) *Plan {
	t.Helper()
	hold, err := HoldOf(loadgen.HoldSpec{Min: 5 * time.Second, Max: 9 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f := labFacts()
	return &Plan{Site: "lab", Nodes: make([]string, 5), Target: TargetRecord{Rate: 300, Hold: hold}, Facts: f, Rec: Recommend(f)}
}

// TestVerificationChecks: the drills run the recommendation, the controls
// one wrong value each, and every spec reads back as written.
func TestVerificationChecks(t *testing.T) {
	p := labPlan(t)
	checks, err := verificationChecks(p)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]check{}
	for _, c := range checks {
		byName[c.spec.Name] = c
		back, err := spec.Parse(c.spec.Name+".md", spec.Format(c.spec, runbookBody(c)))
		if err != nil {
			t.Errorf("%s: %v", c.spec.Name, err)
		}
		if back != nil && string(back.FrontMatter()) != string(c.spec.FrontMatter()) {
			t.Errorf("%s does not read back as written", c.spec.Name)
		}
		if len(c.spec.Expect[inventory.GuardRedlock]) == 0 {
			t.Errorf("%s expects nothing", c.spec.Name)
		}
	}
	want := []string{"plan-node-lost", "plan-slow-node", "plan-power-loss", "plan-hold-at-ttl", "plan-control-short-ttl", "plan-control-no-restart-delay"}
	for _, n := range want {
		if _, ok := byName[n]; !ok {
			t.Errorf("no drill %s", n)
		}
	}
	if len(checks) != len(want) {
		t.Errorf("%d drills, want %d", len(checks), len(want))
	}
	r := p.Rec
	planned := profile.Profile{Nodes: 5, Persistence: []profile.Persistence{profile.PersistAlways}, RestartDelay: r.RestartDelay}
	for _, c := range checks {
		w := c.spec.Workload
		wantTimeout := r.NodeTimeout
		if c.spec.CutsPower() {
			wantTimeout = max(r.NodeTimeout, powerNodeTimeout)
		}
		if w.NodeTimeout != wantTimeout {
			t.Errorf("%s: node timeout %v, want %v", c.spec.Name, w.NodeTimeout, wantTimeout)
		}
		switch c.spec.Name {
		case "plan-control-short-ttl":
			if !c.control || w.LockTTL >= p.Target.Hold.Max || c.spec.Lab.RestartDelay != planned.RestartDelay {
				t.Errorf("%s: control %t, TTL %v (hold tail %v), restart delay %v; want a control with only the TTL wrong", c.spec.Name, c.control, w.LockTTL, p.Target.Hold.Max, c.spec.Lab.RestartDelay)
			}
		case "plan-control-no-restart-delay":
			if !c.control || !c.spec.Lab.NoRestartDelay || c.spec.Lab.Uniform() != profile.PersistEverysec || w.LockTTL != r.TTL || !c.spec.CutsPower() {
				t.Errorf("%s: control %t, lab %+v, TTL %v; want a control with everysec and no delay, the plan's TTL, power cuts", c.spec.Name, c.control, c.spec.Lab, w.LockTTL)
			}
		default:
			if c.control || w.LockTTL != r.TTL || c.spec.Lab.RestartDelay != planned.RestartDelay || c.spec.Lab.Uniform() != profile.PersistAlways {
				t.Errorf("%s: control %t, TTL %v, lab %+v; want the plan's TTL %v, persistence and restart delay %v", c.spec.Name, c.control, w.LockTTL, c.spec.Lab, r.TTL, r.RestartDelay)
			}
		}
	}
	if h := byName["plan-hold-at-ttl"].spec.Workload.Hold; h.Max != 9*time.Second || h.Min != 5*time.Second {
		t.Errorf("plan-hold-at-ttl holds for %v, want the target's uniform:5s:9s", h)
	}
	power := byName["plan-power-loss"].spec
	if len(power.Faults) != 1 || power.Faults[0].Kind != fault.PowerLoss || !slices.Equal(power.Faults[0].Nodes, []int{3, 4, 5}) || power.Workload.Duration < 2*time.Second+r.RestartDelay {
		t.Errorf("plan-power-loss: faults %+v over %v; want a majority's power cut and room for the %v delay", power.Faults, power.Workload.Duration, r.RestartDelay)
	}
	slow := byName["plan-slow-node"].spec
	if add := slow.Faults[0].Params.D("add"); add <= r.NodeTimeout {
		t.Errorf("plan-slow-node adds %v, not more than the node timeout %v", add, r.NodeTimeout)
	}
}

// TestRejudge counts a drill's history again: two holders of one key at
// once are a double grant, and result.json must say the same.
func TestRejudge(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Now()
	hist := drill.NewHistory(t0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	hist.AddHold(inventory.GuardRedlock, inventory.Hold{Key: "lock:a", Holder: "r1", Token: "t1", Granted: at(1), Released: at(4), ValidUntil: at(2)})
	hist.AddHold(inventory.GuardRedlock, inventory.Hold{Key: "lock:a", Holder: "r2", Token: "t2", Granted: at(3), Released: at(5), ValidUntil: at(6)})
	hist.AddHold(inventory.GuardRedlock, inventory.Hold{Key: "lock:b", Holder: "r1", Token: "t3", Granted: at(1), Released: at(2), ValidUntil: at(5)})
	if err := hist.WriteFile(filepath.Join(dir, drill.HistoryFile)); err != nil {
		t.Fatal(err)
	}
	s := &spec.Spec{Name: "plan-control-short-ttl", Expect: map[inventory.Guard][]spec.Expectation{}}
	for _, e := range []string{"safety.double_grants==0", "safety.lock_violations==0"} {
		x, err := spec.ParseExpectation(e, 5)
		if err != nil {
			t.Fatal(err)
		}
		s.Expect[inventory.GuardRedlock] = append(s.Expect[inventory.GuardRedlock], x)
	}
	c := check{spec: s, control: true}
	res := func(grants, violations int64) *drill.Result {
		return &drill.Result{Guards: map[string]*drill.GuardResult{"redlock": {Counts: drill.Counts{DoubleGrants: grants, LockViolations: violations}}}}
	}
	var dv DrillVerdict
	if err := rejudge(&dv, c, res(1, 0), dir); err != nil {
		t.Fatal(err)
	}
	if dv.DoubleGrants != 1 || dv.LockViolations != 0 || dv.Held || len(dv.Expectations) != 2 || dv.Expectations[0].Held || !dv.Expectations[0].FromHistory || !dv.Expectations[1].Held {
		t.Errorf("got %+v; want 1 double grant, no violation (the first holder ran past its validity), the first expectation not held", dv)
	}
	// The engine's counts must agree with the history's.
	var other DrillVerdict
	if err := rejudge(&other, c, res(0, 0), dir); err == nil || !strings.Contains(err.Error(), "disagree") {
		t.Errorf("result.json with no double grant: got %v, want the checker and the history to disagree", err)
	}
	if err := os.Remove(filepath.Join(dir, drill.HistoryFile)); err != nil {
		t.Fatal(err)
	}
	if err := rejudge(&other, c, res(1, 0), dir); err == nil {
		t.Error("no history.jsonl: got nil error")
	}
}

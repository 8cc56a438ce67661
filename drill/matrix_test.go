package drill

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen/loadspec"
)

func TestMatrixWrite(t *testing.T) {
	kill := []Fault{{At: 10 * time.Second, Kind: fault.Kill, Nodes: []int{2}}}
	specA := &Spec{Name: "one-node-loss", Title: "a node crashes", Faults: kill,
		Workload: Workload{Guards: []inventory.Guard{inventory.GuardRedlock, inventory.GuardDBAtomic}, LockTTL: 10 * time.Second, Keys: loadspec.KeySpec{Kind: "uniform", N: 1000}}}
	specB := &Spec{Name: "broken", Faults: kill,
		Workload: Workload{Guards: []inventory.Guard{inventory.GuardRedlockFenced}, LockTTL: 10 * time.Second, Keys: loadspec.KeySpec{Kind: "uniform", N: 1000}}}
	m := NewMatrix([]*Spec{specA, specB})
	// The guards they run, and those a node's crash reaches or has as
	// controls; not db-version (no pause, no hot key) nor redlock-del.
	if got, want := strings.Join(m.Guards, ","), "redis-single,redlock,redsync,node-redlock,redlock-fenced,etcd,etcd-fenced,db-atomic"; got != want {
		t.Errorf("guards: got %s, want %s", got, want)
	}
	res := &Result{Drill: "one-node-loss", Passed: false, GuardOrder: []string{"redlock", "db-atomic"}, Guards: map[string]*GuardResult{
		"redlock": {Passed: true, Availability: 0.995, AcquireP99Ms: 4.2,
			Counts: Counts{DoubleGrants: 3, LockViolations: 0, LostUpdates: 7}},
		"db-atomic": {Passed: false, Availability: 1, Counts: Counts{LostUpdates: 2},
			Expectations: []ExpectationResult{{Expr: "safety.lost_updates==0", Held: false, Observed: "2"}}},
	}}
	m.Add(specA, res, nil, 40*time.Second)
	m.Add(specB, nil, errors.New("lab up: no redis-server"), time.Second)
	if got, want := m.Coverage, (Coverage{Run: 2, Applicable: 16}); got != want {
		t.Errorf("coverage: got %+v, want %+v", got, want)
	}
	if c := m.Drills[0].Cells["etcd"]; c.Mark != MarkNotRun || !c.Applicable || c.Reach != "a control beside a fault on Redis nodes" {
		t.Errorf("etcd's cell in one-node-loss: got %+v, want not run, a control", c)
	}
	dir := t.TempDir()
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, MatrixMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| [one-node-loss](drills/one-node-loss.md) | not run | lock held<br>holder outlived it (3)<br>data LOST (7 units)<br>avail 99.5% · p99 4.2 ms<br>as expected | not run | not run | not run | not run | not run | no lock<br>data LOST (2 units)<br>avail 100%<br>NOT as expected |",
		"| [broken](drills/broken.md) | did not run | did not run | did not run | did not run | did not run | did not run | did not run | did not run |",
		"n/a: not applicable, the drill's faults cannot reach this guard.",
		"Coverage: 2 of 16 applicable cells run (12.5%).",
		"0 of 2 drills as expected",
		"- one-node-loss: db-atomic: safety.lost_updates==0 (observed 2)",
		"- broken did not run: lab up: no redis-server",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("matrix.md lacks %q:\n%s", want, md)
		}
	}
	var back Matrix
	b, _ := os.ReadFile(filepath.Join(dir, MatrixJSON))
	if err := json.Unmarshal(b, &back); err != nil || len(back.Drills) != 2 || back.Drills[1].Error == "" || back.Coverage != m.Coverage ||
		back.Drills[0].Cells["redsync"].Mark != MarkNotRun {
		t.Errorf("matrix.json: %v %+v", err, back)
	}
	html, _ := os.ReadFile(filepath.Join(dir, MatrixHTML))
	for _, want := range []string{`class="unexpected"`, "holder outlived it (3)", `<td class="notrun" title="a control beside a fault on Redis nodes">not run</td>`, "Coverage: 2 of 16"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("matrix.html lacks %q", want)
		}
	}
	if m.Passed() {
		t.Error("Passed: got true with a failed and a broken drill")
	}
}

// TestMatrixNotApplicable: a guard that one drill's faults cannot reach is
// n/a there, whether another drill runs it or not, and counts in no
// coverage.
func TestMatrixNotApplicable(t *testing.T) {
	etcdKill := &Spec{Name: "etcd-quorum-loss", Faults: []Fault{{At: 8 * time.Second, Kind: fault.Kill, Etcd: []int{1, 2}}},
		Workload: Workload{Guards: []inventory.Guard{inventory.GuardEtcd, inventory.GuardRedlock}, LockTTL: 5 * time.Second, Keys: loadspec.KeySpec{Kind: "uniform", N: 1000}}}
	m := NewMatrix([]*Spec{etcdKill})
	res := &Result{Passed: true, Guards: map[string]*GuardResult{"etcd": {Passed: true}, "redlock": {Passed: true}}}
	m.Add(etcdKill, res, nil, time.Second)
	if got, want := m.Coverage, (Coverage{Run: 1, Applicable: 2}); got != want {
		t.Errorf("coverage: got %+v, want %+v (etcd run, etcd-fenced not; redlock runs as a control the fault cannot reach)", got, want)
	}
	if c := m.Drills[0].Cells["redlock"]; c.Mark != MarkRun || c.Applicable {
		t.Errorf("redlock: got %+v, want run and not applicable", c)
	}
	var md strings.Builder
	m.WriteMarkdown(&md)
	if !strings.Contains(md.String(), "| [etcd-quorum-loss](drills/etcd-quorum-loss.md) | lock held") || !strings.Contains(md.String(), "| not run |") {
		t.Errorf("matrix.md:\n%s", md.String())
	}
}

// TestGuardOrderHasEveryGuard: a new guard gets a place among the
// columns, not an alphabetical one after them.
func TestGuardOrderHasEveryGuard(t *testing.T) {
	order := map[inventory.Guard]bool{}
	for _, g := range guardOrder() {
		order[g] = true
	}
	for _, g := range append(inventory.Guards(), inventory.Comparisons()...) {
		if !order[g] {
			t.Errorf("guard %s has no column in guardOrder", g)
		}
	}
}

package drill

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/inventory"
)

func TestMatrixWrite(t *testing.T) {
	specA := &Spec{Name: "client-pause", Title: "a holder freezes", Workload: Workload{Guards: []inventory.Guard{inventory.GuardRedlock, inventory.GuardDBAtomic}}}
	specB := &Spec{Name: "broken", Workload: Workload{Guards: []inventory.Guard{inventory.GuardRedlockFenced}}}
	m := NewMatrix([]*Spec{specA, specB})
	if got := strings.Join(m.Guards, ","); got != "redlock,redlock-fenced,db-atomic" {
		t.Errorf("guards: got %s", got)
	}
	res := &Result{Drill: "client-pause", Passed: false, GuardOrder: []string{"redlock", "db-atomic"}, Guards: map[string]*GuardResult{
		"redlock": {Passed: true, Availability: 0.995, AcquireP99Ms: 4.2,
			Counts: Counts{DoubleGrants: 3, LockViolations: 0, LostUpdates: 7}},
		"db-atomic": {Passed: false, Availability: 1, Counts: Counts{LostUpdates: 2},
			Expectations: []ExpectationResult{{Expr: "safety.lost_updates==0", Held: false, Observed: "2"}}},
	}}
	m.Add(specA, res, nil, 40*time.Second)
	m.Add(specB, nil, errors.New("lab up: no redis-server"), time.Second)
	dir := t.TempDir()
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, MatrixMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| [client-pause](drills/client-pause.md) | lock held<br>holder outlived it (3)<br>data LOST (7 units)<br>avail 99.5% · p99 4.2 ms<br>as expected | – | no lock<br>data LOST (2 units)<br>avail 100%<br>NOT as expected |",
		"| [broken](drills/broken.md) | did not run | did not run | did not run |",
		"0 of 2 drills as expected",
		"- client-pause: db-atomic: safety.lost_updates==0 (observed 2)",
		"- broken did not run: lab up: no redis-server",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("matrix.md lacks %q:\n%s", want, md)
		}
	}
	var back Matrix
	b, _ := os.ReadFile(filepath.Join(dir, MatrixJSON))
	if err := json.Unmarshal(b, &back); err != nil || len(back.Drills) != 2 || back.Drills[1].Error == "" {
		t.Errorf("matrix.json: %v %+v", err, back)
	}
	html, _ := os.ReadFile(filepath.Join(dir, MatrixHTML))
	if !strings.Contains(string(html), `class="unexpected"`) || !strings.Contains(string(html), "holder outlived it (3)") {
		t.Errorf("matrix.html lacks the cells")
	}
	if m.Passed() {
		t.Error("Passed: got true with a failed and a broken drill")
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

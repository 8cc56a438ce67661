package drill

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
)

// TestRunDirCountsWhatResultCounts: after a drill, a guard's run directory
// (summary.json, report.html) shows the double grants, lock violations and
// lost updates of its result.json, in the matrix's words, although the
// load run itself saw none of the holds (as with serve processes, whose
// holds only the history has).
func TestRunDirCountsWhatResultCounts(t *testing.T) {
	dir := t.TempDir()
	gr := &guardRun{guard: inventory.GuardRedlock, dir: filepath.Join(dir, string(inventory.GuardRedlock))}
	sched, err := loadgen.ConstantSchedule(100, 100*time.Millisecond, loadgen.Shard{})
	if err != nil {
		t.Fatal(err)
	}
	ks, err := loadgen.ParseKeys("uniform:1")
	if err != nil {
		t.Fatal(err)
	}
	kg, err := loadgen.NewKeyGen(ks, loadgen.Shard{})
	if err != nil {
		t.Fatal(err)
	}
	gr.report, _, err = loadgen.Execute(context.Background(), loadgen.RunSpec{
		Out:    filepath.Join(gr.dir, "run"),
		Meta:   loadgen.Meta{Target: "noop", Guard: string(gr.guard)},
		Engine: loadgen.Config{Schedule: sched, Target: loadgen.NoopTarget{}, Keys: kg},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The store audit found lost units; the holds are in the history only.
	gr.report.Safety.AuditChecked, gr.report.Safety.LostUpdates = true, 45
	t0 := time.Now()
	hist := NewHistory(t0)
	for i := range 20 {
		g := t0.Add(time.Duration(i) * time.Millisecond)
		hist.AddHold(gr.guard, inventory.Hold{Key: "lock:sku:hot", Holder: "replica-" + strconv.Itoa(i), Token: "t" + strconv.Itoa(i),
			Granted: g, Released: g.Add(100 * time.Millisecond), ValidUntil: g.Add(10 * time.Millisecond)})
	}
	spec := &Spec{Name: "unit", Workload: Workload{Duration: time.Second, Guards: []inventory.Guard{gr.guard}}}
	res, err := judge(spec, 1, hist, []*guardRun{gr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := finishRunDir(gr, nil, hist); err != nil {
		t.Fatal(err)
	}

	want := res.Guards[string(gr.guard)].Counts
	if want.DoubleGrants != 190 || want.LockViolations == 0 || want.LockViolations == want.DoubleGrants || want.LostUpdates != 45 {
		t.Fatalf("result.json counts %+v: want 190 double grants, some but not all of them lock violations, 45 lost updates", want)
	}
	back, err := loadgen.LoadReport(filepath.Join(dir, res.Guards[string(gr.guard)].RunDir))
	if err != nil {
		t.Fatal(err)
	}
	got := back.Summary.Safety
	if got.DoubleGrants != want.DoubleGrants || got.LockViolations != want.LockViolations || got.LostUpdates != want.LostUpdates ||
		got.Oversell != want.Oversell || !got.DoubleGrantsChecked || len(got.Examples) == 0 {
		t.Errorf("summary.json safety %+v, result.json counts %+v: want the same", got, want)
	}
	html, err := os.ReadFile(filepath.Join(back.Dir, loadgen.HTMLFile))
	if err != nil {
		t.Fatal(err)
	}
	card := "190 double grants · " + strconv.FormatInt(want.LockViolations, 10) + " lock violations · 45 lost updates"
	if !strings.Contains(string(html), card) {
		t.Errorf("report.html has no Safety card %q", card)
	}
	if m := regexp.MustCompile(`[0-9]+ violations`).Find(html); m != nil {
		t.Errorf("report.html counts %q: a sum under a word the matrix uses for lock violations", m)
	}
}

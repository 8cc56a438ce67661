package loadgen

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
)

// guardRun records a short no-op run under meta, as a drill records one
// guard's run (the drill lists the Redis nodes for every guard).
func guardRun(t *testing.T, meta Meta, spec RunSpec) *Report {
	t.Helper()
	sched, err := ConstantSchedule(200, 300*time.Millisecond, Shard{})
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := ParseKeys("uniform:10")
	kg, err := NewKeyGen(ks, Shard{})
	if err != nil {
		t.Fatal(err)
	}
	meta.Stages, meta.Keys = "0.3s@200", ks.String()
	spec.Out, spec.Meta = filepath.Join(t.TempDir(), "run"), meta
	spec.Engine = Config{Schedule: sched, Target: NoopTarget{}, Keys: kg, Interval: 100 * time.Millisecond, Recorder: NewRecorder(len(meta.Nodes), 0)}
	r, _, err := Execute(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var fiveNodes = []string{"127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103", "127.0.0.1:7104", "127.0.0.1:7105"}

// TestReportOfAnEtcdGuard: an etcd guard's page names its etcd members, not
// the Redis nodes a drill lists for every guard, has no per-node figures,
// and draws a Redis node's fault apart from an etcd member's.
func TestReportOfAnEtcdGuard(t *testing.T) {
	r := guardRun(t, Meta{Target: "inventory", Guard: "etcd", Nodes: fiveNodes,
		Etcd: []string{"http://127.0.0.1:2379", "http://127.0.0.1:2479", "http://127.0.0.1:2579"}}, RunSpec{})
	start := r.Meta.Started
	appendFaults(t, r.Dir,
		faultlog.Fault{ID: "n2-kill", Node: 2, Kind: "kill", Start: start.Add(50 * time.Millisecond), End: start.Add(100 * time.Millisecond)},
		faultlog.Fault{ID: "e1-kill", Kind: "kill", Params: map[string]string{faultlog.EtcdMemberParam: "1"}, Start: start.Add(150 * time.Millisecond)},
	)
	r, err := LoadReport(r.Dir)
	if err != nil {
		t.Fatal(err)
	}
	d := r.htmlData()
	if !strings.Contains(d.Subtitle, "lock on 3 etcd members") || strings.Contains(d.Subtitle, "lock nodes") {
		t.Errorf("subtitle %q: want the 3 etcd members and no lock nodes", d.Subtitle)
	}
	if len(r.Summary.PerNode) != 0 {
		t.Errorf("per-node figures for an etcd guard: %+v", r.Summary.PerNode)
	}
	if len(d.Faults) != 2 || d.Faults[0].Own || !strings.Contains(d.Faults[0].Name, "does not use") || !d.Faults[1].Own {
		t.Errorf("faults %+v: want kill node2 drawn as another service's, kill etcd1 as the guard's own", d.Faults)
	}
	for _, row := range d.Rows {
		if strings.HasPrefix(row.Name, "lock") && row.P.Count == 0 {
			t.Errorf("a row %q without samples", row.Name)
		}
	}
}

// TestReportOfAGuardWithoutALock: db-atomic takes no lock: no acquire card,
// no lock rows, no per-node figures, and every lock fault is another
// service's; the text summary prints no empty row either.
func TestReportOfAGuardWithoutALock(t *testing.T) {
	r := guardRun(t, Meta{Target: "inventory", Guard: "db-atomic", Nodes: fiveNodes}, RunSpec{})
	d := r.htmlData()
	if !strings.Contains(d.Subtitle, "no lock") || strings.Contains(d.Subtitle, "lock nodes") {
		t.Errorf("subtitle %q: want no lock", d.Subtitle)
	}
	var names []string
	for _, row := range d.Rows {
		names = append(names, row.Name)
	}
	if strings.Join(names, ",") != "e2e (corrected),e2e (uncorrected)" {
		t.Errorf("latency rows %q, want the two e2e rows only", names)
	}
	var txt strings.Builder
	if err := r.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(txt.String(), "lock acquire") || strings.Contains(txt.String(), "node1") {
		t.Errorf("text summary shows a lock figure for a guard without a lock:\n%s", txt.String())
	}
	page, err := os.ReadFile(filepath.Join(r.Dir, HTMLFile))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(page), "Acquire p99") {
		t.Error("report.html has an Acquire p99 card for a guard without a lock")
	}
}

// TestReportOfADrillGuard: RecordDrill gives a guard's run the drill's name
// and verdicts, which title the page and the text summary.
func TestReportOfADrillGuard(t *testing.T) {
	r := guardRun(t, Meta{Target: "inventory", Guard: "redlock", Nodes: fiveNodes}, RunSpec{})
	if got := r.htmlData().Title; got != "redlab load report" {
		t.Errorf("title of a run of its own: %q", got)
	}
	if err := RecordDrill(r.Dir, DrillInfo{}); err == nil {
		t.Error("RecordDrill without a name and a verdict: no error")
	}
	if err := RecordDrill(filepath.Join(t.TempDir(), "none"), DrillInfo{Name: "x", Verdict: "PASS"}); err == nil {
		t.Error("RecordDrill on a directory without a run: no error")
	}
	for _, verdict := range []string{"PASS", "FAIL"} {
		if err := RecordDrill(r.Dir, DrillInfo{Name: "one-node-loss", Verdict: verdict, Guard: "every expectation held"}); err != nil {
			t.Fatal(err)
		}
		r, err := LoadReport(r.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Write(); err != nil {
			t.Fatal(err)
		}
		if got, want := r.htmlData().Title, "drill one-node-loss: "+verdict+" · guard redlock"; got != want {
			t.Errorf("title %q, want %q", got, want)
		}
		page, _ := os.ReadFile(filepath.Join(r.Dir, HTMLFile))
		class := map[string]string{"PASS": `class="v ok">PASS`, "FAIL": `class="v bad">FAIL`}[verdict]
		if !strings.Contains(string(page), class) || !strings.Contains(string(page), "this guard: every expectation held") {
			t.Errorf("report.html lacks the drill card %q with the guard's line", class)
		}
		txt, _ := os.ReadFile(filepath.Join(r.Dir, TextFile))
		if !strings.Contains(string(txt), "drill one-node-loss: "+verdict+" (this guard: every expectation held)") {
			t.Errorf("summary.txt lacks the drill:\n%s", txt)
		}
	}
}

// TestLateCard: the Late card counts what was never sent and is red only
// over DefaultMaxLateRatio of the requests.
func TestLateCard(t *testing.T) {
	r := guardRun(t, Meta{Target: "noop"}, RunSpec{})
	for _, tc := range []struct {
		late, requests int64
		bad            bool
	}{{0, 1000, false}, {10, 1000, false}, {11, 1000, true}, {500, 1000, true}} {
		r.Summary.Requests = tc.requests
		r.Summary.Outcomes = map[string]int64{Late.String(): tc.late}
		d := r.htmlData()
		if d.Late != tc.late || d.LateBad != tc.bad {
			t.Errorf("%d late of %d: card %d, red %v; want %d, red %v", tc.late, tc.requests, d.Late, d.LateBad, tc.late, tc.bad)
		}
	}
}

// TestRunCopiesTheLabsFaults: a run given its lab's fault log gets the
// faults that were in force during it, and only those.
func TestRunCopiesTheLabsFaults(t *testing.T) {
	labLog := filepath.Join(t.TempDir(), faultlog.FileName)
	now := time.Now().UTC()
	for _, f := range []faultlog.Fault{
		{ID: "before", Node: 1, Kind: "kill", Start: now.Add(-time.Hour), End: now.Add(-59 * time.Minute)},
		{ID: "during", Node: 2, Kind: "partition", Start: now.Add(-time.Minute)}, // still in force
		{ID: "after", Node: 3, Kind: "kill", Start: now.Add(time.Hour)},
	} {
		if err := faultlog.Append(labLog, f.Events()...); err != nil {
			t.Fatal(err)
		}
	}
	r := guardRun(t, Meta{Target: "inventory", Guard: "redlock", Nodes: fiveNodes}, RunSpec{FaultLog: labLog})
	if len(r.Faults) != 1 || r.Faults[0].ID != "during" {
		t.Fatalf("run's faults %+v, want the partition in force during it only", r.Faults)
	}
	if d := r.htmlData(); len(d.Faults) != 1 || !d.Faults[0].Own || !d.Faults[0].Open {
		t.Errorf("shaded %+v, want the partition, the guard's own, open to the end", d.Faults)
	}
	// A lab without a fault log: no faults, no error.
	if r := guardRun(t, Meta{Target: "noop"}, RunSpec{FaultLog: filepath.Join(t.TempDir(), "none.jsonl")}); len(r.Faults) != 0 {
		t.Errorf("faults from a missing log: %+v", r.Faults)
	}
}

// TestNodeLatencyIsAnswersOnly: a node's refused SETs are counted and drawn
// as failures, not as (fast) latency.
func TestNodeLatencyIsAnswersOnly(t *testing.T) {
	rec := NewRecorder(2, 0)
	rec.RecordNodes([]NodeResult{
		{Node: 0, Outcome: NodeGranted, Latency: 2 * time.Millisecond},
		{Node: 1, Outcome: NodeError, Latency: 50 * time.Microsecond},
		{Node: 1, Outcome: NodeTimeout, Latency: 250 * time.Millisecond},
		{Node: 0, Outcome: NodeAbandoned},
		{Node: 1, Outcome: NodeTaken, Latency: 3 * time.Millisecond},
	})
	h := NewHistSet(2)
	rec.Collect(h)
	if got := h.Nodes[0].TotalCount(); got != 1 {
		t.Errorf("node1 latency samples %d, want 1 (the grant; not the abandoned request)", got)
	}
	if got, min := h.Nodes[1].TotalCount(), h.Nodes[1].Min(); got != 1 || min < int64(2*time.Millisecond) {
		t.Errorf("node2 latency samples %d (min %v), want the one answer, 3ms", got, time.Duration(min))
	}
	if h.NodeOutcomes[1][NodeError] != 1 || h.NodeOutcomes[1][NodeTimeout] != 1 {
		t.Errorf("node2 outcomes %v, want the error and the timeout counted", h.NodeOutcomes[1])
	}
}

// TestWordsAreDefined: every outcome and node outcome has a meaning, and
// loadgen/README.md gives each the same one.
func TestWordsAreDefined(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	check := func(name, meaning string) {
		if meaning == "" {
			t.Errorf("%s has no meaning", name)
		}
		if row := "| `" + name + "` | " + meaning + " |"; !strings.Contains(string(readme), row) {
			t.Errorf("README.md lacks the row %q", row)
		}
	}
	for o := Outcome(0); o < numOutcomes; o++ {
		check(o.String(), o.Meaning())
	}
	for o := NodeOutcome(0); o < numNodeOutcomes; o++ {
		check(o.String(), o.Meaning())
	}
	check("late starts", lateStartsMeaning)
}

package drill

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
)

// TestTimeline draws a drill with one fault, a double grant, a lock
// violation and a fenced write, and finds each on the page.
func TestTimeline(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Now()
	h := NewHistory(t0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	h.AddFault("f1", "kill", []int{2}, "", "start", at(1))
	h.AddFault("f1", "kill", []int{2}, "", "end", at(3))
	g := inventory.GuardRedlock
	// A holder that outlived its validity, then one inside both validities.
	h.AddHold(g, inventory.Hold{Key: "k1", Holder: "a", Token: "a", Granted: at(0.5), ValidUntil: at(1), Released: at(2)})
	h.AddHold(g, inventory.Hold{Key: "k1", Holder: "b", Token: "b", Granted: at(1.5), ValidUntil: at(3), Released: at(2.5)})
	h.AddHold(g, inventory.Hold{Key: "k2", Holder: "c", Token: "c", Granted: at(4), ValidUntil: at(6), Released: at(5)})
	h.AddHold(g, inventory.Hold{Key: "k2", Holder: "d", Token: "d", Granted: at(4.5), ValidUntil: at(6), Released: at(5.5)})
	h.AddOp(g, "run", loadgen.Op{Seq: 1, Key: "k1", Quantity: 1, Intended: at(2)}, loadgen.Result{Outcome: loadgen.Fenced}, at(2), at(2.1))
	h.AddOp(g, "run", loadgen.Op{Seq: 2, Key: "k1", Quantity: 1, Intended: at(2.2)}, loadgen.Result{Outcome: loadgen.Unavailable}, at(2.2), at(2.3))
	if err := h.WriteFile(filepath.Join(dir, HistoryFile)); err != nil {
		t.Fatal(err)
	}
	res := &Result{Drill: "unit", Title: "a unit drill", Passed: true, DurationS: 6, GuardOrder: []string{string(g)},
		Guards: map[string]*GuardResult{string(g): {Counts: Counts{LostUpdates: 3}, Availability: 0.5}}}
	if err := writeJSON(filepath.Join(dir, ResultFile), res); err != nil {
		t.Fatal(err)
	}
	if err := WriteTimeline(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, TimelineFile))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{"drill unit: <span class=\"pass\">PASS", "node 2", ">kill<", "lost 3 units",
		"4 grants · 1 double · 1 violations · 1 fenced", "double grant at 1.50s on k1", "lock violation at 4.50s on k2",
		"stale write fenced at 2.10s on k1", `href="redlock/run/report.html"`, "<polyline"} {
		if !strings.Contains(page, want) {
			t.Errorf("timeline.html lacks %q", want)
		}
	}
}

package loadgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
)

// appendFaults records faults in dir's faults.jsonl as the lab does.
func appendFaults(t *testing.T, dir string, faults ...faultlog.Fault) {
	t.Helper()
	for _, f := range faults {
		if err := faultlog.Append(filepath.Join(dir, FaultsFile), f.Events()...); err != nil {
			t.Fatal(err)
		}
	}
}

// A run directory's faults.jsonl is the lab's log, read by the one reader
// the lab uses: its faults are shaded, and a line in any other shape stops
// the report with the line named instead of being half understood.
func TestReportReadsTheLabsFaultLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	r, _ := executeRun(t, dir, runOpts{rate: 100, d: 300 * time.Millisecond})
	start := r.Meta.Started
	appendFaults(t, dir,
		faultlog.Fault{ID: "n2-pause", Node: 2, Kind: "pause", Start: start.Add(200 * time.Millisecond)},
		faultlog.Fault{ID: "n1-kill", Node: 1, Kind: "kill", Start: start.Add(100 * time.Millisecond), End: start.Add(150 * time.Millisecond)},
	)
	r, err := LoadReport(dir)
	if err != nil {
		t.Fatal(err)
	}
	d := r.htmlData()
	if len(d.Faults) != 2 || d.Faults[0].Name != "kill node1" || d.Faults[0].Open || d.Faults[1].Name != "pause node2" || !d.Faults[1].Open {
		t.Errorf("shaded faults: got %+v, want kill node1 (closed) then pause node2 (open)", d.Faults)
	}
	if from, to := d.Faults[0].From, d.Faults[0].To; from < 0.099 || from > 0.101 || to < 0.149 || to > 0.151 {
		t.Errorf("kill node1 shaded from %.3fs to %.3fs, want 0.100s to 0.150s", from, to)
	}

	// The shape an older reader also accepted: a phase object with a name.
	old := `{"name":"kill node 2","start":"` + start.Format(time.RFC3339Nano) + `"}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, FaultsFile), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadReport(dir); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("LoadReport with a phase-object fault line: got %v, want an error naming line 1", err)
	}
}

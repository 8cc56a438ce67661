package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRecorderAndReadFaults(t *testing.T) {
	dir := t.TempDir()
	r1, r2 := newRecorder(dir, 1), newRecorder(dir, 2)
	kill, err := r1.start(FaultKill, nil)
	if err != nil {
		t.Fatal(err)
	}
	part, err := r2.start(FaultPartition, map[string]string{"why": "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r1.end(kill.ID, FaultKill, map[string]string{"restarts": "1"}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFaults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d faults, want 2: %+v", len(got), got)
	}
	tests := []struct {
		f          Fault
		id         string
		node       int
		kind       FaultKind
		active     bool
		wantParams map[string]string
	}{
		{got[0], kill.ID, 1, FaultKill, false, map[string]string{"restarts": "1"}},
		{got[1], part.ID, 2, FaultPartition, true, map[string]string{"why": "test"}},
	}
	for _, tt := range tests {
		if tt.f.ID != tt.id || tt.f.Node != tt.node || tt.f.Kind != tt.kind || tt.f.Active() != tt.active {
			t.Errorf("got %+v, want id %s node %d kind %s active %v", tt.f, tt.id, tt.node, tt.kind, tt.active)
		}
		for k, v := range tt.wantParams {
			if tt.f.Params[k] != v {
				t.Errorf("%s: param %s: got %q, want %q", tt.id, k, tt.f.Params[k], v)
			}
		}
		if !tt.f.Active() && tt.f.End.Before(tt.f.Start) {
			t.Errorf("%s: end %v before start %v", tt.id, tt.f.End, tt.f.Start)
		}
	}
	if kill.ID == part.ID {
		t.Errorf("two faults share the id %s", kill.ID)
	}
}

func TestReadFaultsMissingAndBroken(t *testing.T) {
	dir := t.TempDir()
	if got, err := ReadFaults(dir); err != nil || len(got) != 0 {
		t.Errorf("missing file: got %v, %v; want no faults, no error", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, FaultsFile), []byte("{\"id\":\"a\",\"fault\":\"kill\",\"event\":\"start\",\"time\":\""+time.Now().Format(time.RFC3339Nano)+"\"}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFaults(dir); err == nil {
		t.Error("broken line: got no error, want one naming the line")
	}
}

// TestFaultTimesKeepNanoseconds: a fault's times survive faults.jsonl to
// the nanosecond, written as RFC 3339 in UTC.
func TestFaultTimesKeepNanoseconds(t *testing.T) {
	dir := t.TempDir()
	r := newRecorder(dir, 1)
	f, err := r.start(FaultPowerLoss, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFaults(dir)
	if err != nil || len(got) != 1 {
		t.Fatalf("got %v, %v; want one fault", got, err)
	}
	if !got[0].Start.Equal(f.Start) || got[0].Start.Nanosecond() != f.Start.Nanosecond() {
		t.Errorf("start read back as %v, want %v (to the nanosecond)", got[0].Start, f.Start)
	}
	b, err := os.ReadFile(filepath.Join(dir, FaultsFile))
	if err != nil {
		t.Fatal(err)
	}
	var line struct {
		Time string `json:"time"`
	}
	if err := json.Unmarshal(b, &line); err != nil {
		t.Fatal(err)
	}
	if want := f.Start.Format(time.RFC3339Nano); line.Time != want || !strings.HasSuffix(line.Time, "Z") {
		t.Errorf("time in %s: got %q, want %q (RFC 3339, nanoseconds, UTC)", FaultsFile, line.Time, want)
	}
}

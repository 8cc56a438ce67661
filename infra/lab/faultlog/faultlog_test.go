package faultlog

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// What the writer appends, the reader returns: start and end merged per ID,
// params of the end over those of the start, ordered by start.
func TestAppendRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	steps := [][]Event{
		{{ID: "b", Node: 3, Kind: "pause", Phase: Start, Time: at(6), Params: map[string]string{"for": "2s"}}},
		{{ID: "a", Node: 2, Kind: "kill", Phase: Start, Time: at(5)}},
		{{ID: "b", Node: 3, Kind: "pause", Phase: End, Time: at(8), Params: map[string]string{"for": "2s", "late": "no"}}},
		{{ID: "c", Kind: "client-pause", Phase: Start, Time: at(9)}, {ID: "c", Kind: "client-pause", Phase: End, Time: at(9.5)}},
		{{ID: "a", Node: 2, Kind: "kill", Phase: End, Time: at(12), Params: map[string]string{"restarts": "1"}}},
		{{ID: "d", Node: 1, Kind: "partition", Phase: Start, Time: at(13)}},
	}
	for _, evs := range steps {
		if err := Append(path, evs...); err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	got, err := Read(path)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	want := []Fault{
		{ID: "a", Node: 2, Kind: "kill", Start: at(5), End: at(12), Params: map[string]string{"restarts": "1"}},
		{ID: "b", Node: 3, Kind: "pause", Start: at(6), End: at(8), Params: map[string]string{"for": "2s", "late": "no"}},
		{ID: "c", Kind: "client-pause", Start: at(9), End: at(9.5)},
		{ID: "d", Node: 1, Kind: "partition", Start: at(13)},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d faults %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if !sameFault(got[i], want[i]) {
			t.Errorf("fault %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	names := []string{"kill node2", "pause node3", "client-pause", "partition node1"}
	for i, f := range got {
		if f.Name() != names[i] {
			t.Errorf("Name of %s: got %q, want %q", f.ID, f.Name(), names[i])
		}
	}
	if got[3].Active() != true || got[0].Active() != false {
		t.Errorf("Active: got %v, %v; want false for the ended fault, true for the open one", got[0].Active(), got[3].Active())
	}

	// A fault rewritten through Events reads back the same (merge copies faults this way).
	copyPath := filepath.Join(t.TempDir(), FileName)
	for _, f := range got {
		if err := Append(copyPath, f.Events()...); err != nil {
			t.Fatal(err)
		}
	}
	again, err := Read(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if i >= len(again) || !sameFault(again[i], got[i]) {
			t.Errorf("through Events: got %+v, want %+v", again, got)
			break
		}
	}
}

func sameFault(a, b Fault) bool {
	if a.ID != b.ID || a.Node != b.Node || a.Kind != b.Kind || !a.Start.Equal(b.Start) || !a.End.Equal(b.End) || len(a.Params) != len(b.Params) {
		return false
	}
	for k, v := range b.Params {
		if a.Params[k] != v {
			return false
		}
	}
	return true
}

// Several writers (the node supervisors are separate processes; the lock is
// per open file, so goroutines opening the file each time contend the same
// way) never interleave within a line.
func TestNameEtcdMember(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if err := Append(path, Event{ID: "e1", Kind: "kill", Phase: Start, Time: at(1), Params: map[string]string{EtcdMemberParam: "2", "target": "leader"}}); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Node != 0 || got[0].Name() != "kill etcd2" {
		t.Fatalf("an etcd member's fault: got %+v named %q, want node 0 named \"kill etcd2\"", got, got[0].Name())
	}
}

func TestAppendConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	const writers, faults = 6, 40
	pad := map[string]string{"pad": strings.Repeat("x", 3000)} // several writes' worth if unlocked
	var wg sync.WaitGroup
	errs := make(chan error, writers*faults)
	for w := 1; w <= writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < faults; i++ {
				id := fmt.Sprintf("n%d-%d", w, i)
				if err := Append(path, Event{ID: id, Node: w, Kind: "kill", Phase: Start, Time: at(float64(i)), Params: pad}); err != nil {
					errs <- err
				}
				if err := Append(path, Event{ID: id, Node: w, Kind: "kill", Phase: End, Time: at(float64(i) + 0.5)}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatalf("Read after concurrent appends: %v", err)
	}
	if len(got) != writers*faults {
		t.Fatalf("got %d faults, want %d", len(got), writers*faults)
	}
	for _, f := range got {
		if f.Active() || f.End.Sub(f.Start) != 500*time.Millisecond {
			t.Errorf("fault %s: start %v end %v, want an end 500ms after the start", f.ID, f.Start, f.End)
		}
	}
}

// One format only: the shapes an older report reader accepted, and lines
// that break the start-then-end rule, are errors naming the line.
func TestReadRejects(t *testing.T) {
	start := `{"id":"a","node":2,"fault":"kill","event":"start","time":"2025-01-01T10:00:05Z"}`
	tests := []struct {
		name, line string
		want       string
	}{
		{"a phase object", `{"name":"kill node 2","start":"2025-01-01T10:00:05Z","end":"2025-01-01T10:00:12Z"}`, "no id"},
		{"phase instead of event", `{"id":"x","fault":"kill","phase":"start","time":"2025-01-01T10:00:05Z"}`, `"event" is ""`},
		{"inject instead of start", `{"id":"x","fault":"kill","event":"inject","time":"2025-01-01T10:00:05Z"}`, `"event" is "inject"`},
		{"kind instead of fault", `{"id":"x","kind":"kill","event":"start","time":"2025-01-01T10:00:05Z"}`, `no "fault"`},
		{"epoch milliseconds", `{"id":"x","fault":"kill","event":"start","time":1735725605000}`, "line 2"},
		{"at instead of time", `{"id":"x","fault":"kill","event":"start","at":"2025-01-01T10:00:05Z"}`, "no time"},
		{"negative node", `{"id":"x","node":-1,"fault":"kill","event":"start","time":"2025-01-01T10:00:05Z"}`, "node -1"},
		{"not json", `kill node2 at 10:00`, "line 2"},
		{"a comment", `# faults`, "line 2"},
		{"end without start", `{"id":"zz","fault":"kill","event":"end","time":"2025-01-01T10:00:05Z"}`, "never started"},
		{"second start", start, "starts a second time"},
		{"end on another node", `{"id":"a","node":3,"fault":"kill","event":"end","time":"2025-01-01T10:00:07Z"}`, "started as kill on node 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			if err := os.WriteFile(path, []byte(start+"\n"+tt.line+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Read(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "line 2") {
				t.Errorf("got %+v, %v; want an error on line 2 containing %q", got, err, tt.want)
			}
		})
	}
	t.Run("second end", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), FileName)
		end := `{"id":"a","node":2,"fault":"kill","event":"end","time":"2025-01-01T10:00:07Z"}`
		if err := os.WriteFile(path, []byte(start+"\n"+end+"\n"+end+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(path); err == nil || !strings.Contains(err.Error(), "ends a second time") {
			t.Errorf("got %v, want an error about the second end", err)
		}
	})
}

func TestAppendRefusesWhatReadRejects(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	for _, ev := range []Event{
		{Kind: "kill", Phase: Start, Time: t0},
		{ID: "a", Phase: Start, Time: t0},
		{ID: "a", Kind: "kill", Phase: "inject", Time: t0},
		{ID: "a", Kind: "kill", Phase: Start},
	} {
		if err := Append(path, Event{ID: "ok", Kind: "kill", Phase: Start, Time: t0}, ev); err == nil {
			t.Errorf("Append(%+v): got nil error", ev)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a refused batch wrote the file (stat: %v); want nothing written", err)
	}
}

func TestReadMissing(t *testing.T) {
	got, err := Read(filepath.Join(t.TempDir(), FileName))
	if err != nil || got != nil {
		t.Errorf("missing file: got %v, %v; want no faults, no error", got, err)
	}
}

// The line format is the package's contract with every reader of a run
// directory: pin it.
func TestLineFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if err := Append(path, Event{ID: "n2-kill-1", Node: 2, Kind: "kill", Phase: Start, Time: at(5.25), Params: map[string]string{"delay": "2s"}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"n2-kill-1","node":2,"fault":"kill","event":"start","time":"2025-01-01T10:00:05.25Z","params":{"delay":"2s"}}` + "\n"
	if string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
}

func Example() {
	dir, err := os.MkdirTemp("", "faultlog")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, FileName)
	start := time.Date(2025, 1, 1, 10, 0, 5, 0, time.UTC)
	_ = Append(path, Event{ID: "n2-kill-1", Node: 2, Kind: "kill", Phase: Start, Time: start})
	_ = Append(path, Event{ID: "n2-kill-1", Node: 2, Kind: "kill", Phase: End, Time: start.Add(7 * time.Second)})
	faults, err := Read(path)
	if err != nil {
		panic(err)
	}
	for _, f := range faults {
		fmt.Println(f.Name(), f.End.Sub(f.Start))
	}
	// Output:
	// kill node2 7s
}

package loadgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHlogHeaderIsJavasWithTheUnits(t *testing.T) {
	path := filepath.Join(t.TempDir(), HlogFile)
	start := time.UnixMilli(1_700_000_000_123)
	w, err := createHlog(path, start, "load --rate 100")
	if err != nil {
		t.Fatal(err)
	}
	set := NewHistSet(1)
	set.recordLatency(set.E2E, 2500*time.Microsecond)
	_ = set.Attempts.RecordValue(3)
	if err := w.write(set, start.Add(time.Second), start.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	want := []string{
		"#[Histogram log format version 1.3]",
		"#redlab load --rate 100",
		"#[Values in nanoseconds; Tag=attempts counts lock acquire attempts. Interval_Max in milliseconds; for Tag=attempts, in attempts.]",
		// Java's HistogramLogWriter: seconds with milliseconds, then Date.toString().
		"#[StartTime: 1700000000.123 (seconds since epoch), Tue Nov 14 22:13:20 UTC 2023]",
		"#[BaseTime: 1700000000.123 (seconds since epoch)]",
		`"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"`,
	}
	for i, w := range want {
		if i >= len(lines) || lines[i] != w {
			t.Fatalf("line %d: got %q, want %q\n%s", i+1, lines[min(i, len(lines)-1)], w, b)
		}
	}
	// Interval lines: seconds from the start; Interval_Max in ms, a count
	// for attempts.
	prefixes := map[string]string{
		TagE2E:      "Tag=e2e,1.000,1.000,2.501,HISTF",
		TagAttempts: "Tag=attempts,1.000,1.000,3.000,HISTF",
		"node1":     "Tag=node1,1.000,1.000,0.000,HISTF",
	}
	for tag, prefix := range prefixes {
		found := false
		for _, l := range lines[len(want):] {
			if strings.HasPrefix(l, "Tag="+tag+",") {
				found = true
				if !strings.HasPrefix(l, prefix) {
					t.Errorf("%s line: got %.60q, want it to start %q", tag, l, prefix)
				}
			}
		}
		if !found {
			t.Errorf("no line for tag %s", tag)
		}
	}
}

func TestRunHlogNamesTheCommandOnce(t *testing.T) {
	for _, command := range []string{"load --rate 100", "sweep --rates 100,200", "merge a b"} {
		dir := filepath.Join(t.TempDir(), "run")
		w, err := CreateRun(dir, Meta{Command: command, IntervalMs: 1000})
		if err != nil {
			t.Fatal(err)
		}
		start := time.UnixMilli(1_700_000_000_000)
		if err := w.Interval(&Interval{Start: start, End: start.Add(time.Second), Hists: NewHistSet(0)}); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, HlogFile))
		if err != nil {
			t.Fatal(err)
		}
		if _, rest, _ := strings.Cut(string(b), "\n"); !strings.HasPrefix(rest, "#redlab "+command+"\n") {
			t.Errorf("second line: got %q, want %q", strings.SplitN(rest, "\n", 2)[0], "#redlab "+command)
		}
	}
}

func TestHlogKeepsAnIntervalThatEndsBeforeItStarts(t *testing.T) {
	dir := t.TempDir()
	start := time.UnixMilli(1_700_000_000_123)
	w, err := createHlog(filepath.Join(dir, HlogFile), start, "load")
	if err != nil {
		t.Fatal(err)
	}
	set := NewHistSet(0)
	set.recordLatency(set.E2E, time.Millisecond)
	if err := w.write(set, start.Add(time.Second), start.Add(time.Second-5*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	var e2e int64
	err = readHlogFile(dir, func(e *hlogEntry) error {
		if e.Tag == TagE2E {
			e2e += e.Hist.TotalCount()
			if e.EndMs != e.StartMs {
				t.Errorf("read back [%d, %d), want length 0", e.StartMs, e.EndMs)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if e2e != 1 {
		t.Errorf("read back %d e2e samples, want 1", e2e)
	}
}

package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/loadgen"
	"github.com/redlocklab/redlocklab/loadgen/internal/floor"
)

func TestRenderPairsFrontsWithDirect(t *testing.T) {
	rows := []row{
		{path: "fronts", fsync: "always", knee: 400, acquireP50: 0.60, acquireP99: 8, cpuPerReserved: 2.6, genCPUPerReserved: 0.55, goodput: 398, overRate: 1200, overGoodput: 380,
			spikeRate: 1200, calmRate: 200, spikeFor: 20 * time.Second, recovery: 3 * time.Second, recovered: true,
			steps: map[float64]stepFigures{100: {0.55, 3.0}, 400: {0.60, 2.6}}},
		{path: "direct", fsync: "always", knee: 500, acquireP50: 0.50, acquireP99: 6, cpuPerReserved: 2.0, goodput: 497, overRate: 1500, overGoodput: 470,
			spikeRate: 1500, calmRate: 250, spikeFor: 20 * time.Second,
			steps: map[float64]stepFigures{100: {0.45, 2.5}, 400: {0.40, 2.0}, 500: {0.50, 2.0}}},
		{path: "fronts", fsync: "everysec", knee: 0},
	}
	fl := &floor.File{
		Disk:   []floor.Disk{{Writers: 1, SyncsPerS: 812.4, RecordBytes: 64, DurationS: 5}, {Writers: 5, SyncsPerS: 2310, RecordBytes: 64, DurationS: 5}},
		Fanout: map[string]floor.Fanout{"always": {Nodes: 5, Workers: 64, DurationS: 5, LocksPerS: 1000}, "everysec": {Nodes: 5, Workers: 64, DurationS: 5, LocksPerS: 9000}},
		Client: map[string]floor.Client{"fronts:always": {Rate: 400, Nodes: 5, DurationS: 20, CPUMsPerOp: 0.5}, "direct:always": {Rate: 500, Nodes: 5, DurationS: 20, CPUMsPerOp: 0.4}},
	}
	var b bytes.Buffer
	render(&b, rows, fl, "measured somewhere")
	got := b.String()
	for _, want := range []string{
		"| lab fronts | always | 400 | 0.60 | 8.00 | 2.60 | 0.55 | 1.10× (of 0.50) | 398 | 380 (at 1200) | 95% | 3 s | 812 / 2310 | 1000 | 400/s = 40% |",
		"| direct to redis-server | always | 500 | 0.50 | 6.00 | 2.00 | – | – | 497 | 470 (at 1500) | 95% | not by the run's end | 812 / 2310 | 1000 | 500/s = 50% |",
		"Generator ÷ bare client: the load generator's CPU per reservation at the knee",
		"for 20 s: open loop, one SET NX PX to each of the 5 nodes in parallel",
		"Spike: 20 s at three times the knee, then half the knee;",
		"| lab fronts | everysec | none met the SLO | | | | | | | | | | 812 / 2310 | 9000 | – |",
		"straight to the 5 redis-servers: one SET NX PX to every node in parallel, then one compare-and-delete to every node in parallel, by 64 workers back to back on fresh keys for 5 s.",
		"The disk is 64-byte appends, each followed by fdatasync,",
		"With appendfsync always each lock+unlock is two fsynced writes on every node, so the disk bounds everything above it",
		"- appendfsync always, lab fronts against direct at 400/s: CPU per reservation 1.30× (2.60 vs 2.00 ms), acquire p50 +0.20 ms; knee 0.80×.",
		"\nmeasured somewhere\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q; got:\n%s", want, got)
		}
	}
	if strings.Contains(got, "appendfsync everysec, lab fronts") {
		t.Errorf("a comparison for a setup with no knee:\n%s", got)
	}
}

// TestRenderKneeAtTheSweepsTop: a sweep whose every rate met the SLO gives
// a lower bound, marked and explained, not a knee.
func TestRenderKneeAtTheSweepsTop(t *testing.T) {
	rows := []row{
		{path: "fronts", fsync: "always", knee: 2400, kneeAtTop: true, acquireP50: 0.5, acquireP99: 4, goodput: 2400},
		{path: "direct", fsync: "always", knee: 2000, acquireP50: 0.5, acquireP99: 4, goodput: 2000},
	}
	fl := &floor.File{Fanout: map[string]floor.Fanout{"always": {Nodes: 5, Workers: 64, DurationS: 5, LocksPerS: 4000}}}
	var b bytes.Buffer
	render(&b, rows, fl, "")
	got := b.String()
	for _, want := range []string{
		"| lab fronts | always | ≥ 2400 | 0.50 |",
		"| ≥ 2400/s = 60% |",
		"| direct to redis-server | always | 2000 | 0.50 |",
		"| 2000/s = 50% |",
		"≥: every rate of that sweep met the SLO",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q; got:\n%s", want, got)
		}
	}
	rows[0].kneeAtTop = false
	b.Reset()
	render(&b, rows, fl, "")
	if strings.Contains(b.String(), "≥") {
		t.Errorf("no knee at the top, yet a ≥:\n%s", b.String())
	}
}

func TestReplaceBetween(t *testing.T) {
	doc := "# T\n\n" + BeginMarker + "\nold table\n" + EndMarker + "\n\nafter\n"
	got, err := replaceBetween([]byte(doc), []byte("| new |\n\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "# T\n\n" + BeginMarker + "\n| new |\n" + EndMarker + "\n\nafter\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, bad := range []string{"no markers", EndMarker + BeginMarker, BeginMarker + " only"} {
		if _, err := replaceBetween([]byte(bad), []byte("x")); err == nil {
			t.Errorf("replaceBetween(%q): got nil error", bad)
		}
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		nil,
		{"fronts=" + dir},       // no fsync
		{"proxy:always=" + dir}, // unknown path
		{"fronts:always=" + filepath.Join(dir, "x")}, // no sweep there
	} {
		if err := run(args, "", "", "", &bytes.Buffer{}); err == nil {
			t.Errorf("run(%q): got nil error", args)
		}
	}
}

func TestFloorCells(t *testing.T) {
	disk := []floor.Disk{{Writers: 1, SyncsPerS: 900}, {Writers: 5, SyncsPerS: 2600}}
	for _, tc := range []struct {
		name string
		fl   *floor.File
		r    row
		want string
	}{
		{"no floor file", &floor.File{}, row{fsync: "always", knee: 300}, " – | – | – |"},
		{"disk only", &floor.File{Disk: disk}, row{fsync: "always", knee: 300}, " 900 / 2600 | – | – |"},
		{"one writer only", &floor.File{Disk: disk[:1]}, row{fsync: "always", knee: 300}, " – | – | – |"},
		{"the row's policy", &floor.File{Disk: disk, Fanout: map[string]floor.Fanout{"always": {LocksPerS: 731}, "everysec": {LocksPerS: 9000}}},
			row{fsync: "always", knee: 300}, " 900 / 2600 | 731 | 300/s = 41% |"},
		{"another policy only", &floor.File{Fanout: map[string]floor.Fanout{"everysec": {LocksPerS: 9000}}}, row{fsync: "always", knee: 300}, " – | – | – |"},
		{"no knee", &floor.File{Fanout: map[string]floor.Fanout{"always": {LocksPerS: 731}}}, row{fsync: "always"}, " – | 731 | – |"},
		{"errors", &floor.File{Fanout: map[string]floor.Fanout{"always": {LocksPerS: 500, Errors: 3}}}, row{fsync: "always", knee: 100}, " – | 500 (3 errors) | 100/s = 20% |"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := floorCells(tc.fl, tc.r); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRunReadsFloor runs the table on a setup whose sweep met no SLO
// (testdata/noknee) with floor files as the script leaves them.
func TestRunReadsFloor(t *testing.T) {
	setup := "direct:everysec=" + filepath.Join("testdata", "noknee")
	write := func(t *testing.T, change func(*floor.File)) string {
		t.Helper()
		path := filepath.Join(t.TempDir(), "floor.json")
		if err := floor.Update(path, change); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name    string
		floor   func(t *testing.T) string // "" for no -floor
		want    string                    // the row
		wantErr bool
	}{
		{"no floor", func(*testing.T) string { return "" },
			"| direct to redis-server | everysec | none met the SLO | | | | | | | | | | – | – | – |", false},
		{"a floor file not written", func(t *testing.T) string { return filepath.Join(t.TempDir(), "floor.json") },
			"| direct to redis-server | everysec | none met the SLO | | | | | | | | | | – | – | – |", false},
		{"disk and fan-out", func(t *testing.T) string {
			return write(t, func(f *floor.File) {
				f.Disk = []floor.Disk{{Writers: 1, SyncsPerS: 700}, {Writers: 5, SyncsPerS: 2000}}
				f.Fanout = map[string]floor.Fanout{"everysec": {Nodes: 5, Workers: 64, LocksPerS: 12000}}
			})
		}, "| direct to redis-server | everysec | none met the SLO | | | | | | | | | | 700 / 2000 | 12000 | – |", false},
		{"not JSON", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "floor.json")
			if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
				t.Fatal(err)
			}
			return path
		}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			err := run([]string{setup}, tc.floor(t), "", "", &b)
			if tc.wantErr {
				if err == nil {
					t.Errorf("got nil error and\n%s, want an error", b.String())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tc.want+"\n") {
				t.Errorf("got\n%s\nwant the row %q", b.String(), tc.want)
			}
		})
	}
}

func TestRenderCost(t *testing.T) {
	rows := []costRow{
		{guard: "redlock", rate: 50, e2eP50: 2.5, e2eP99: 9, acquireP50: 1.2, acqP99: 6, reservedShare: 1,
			marginal: 2.34, lowRate: 100, highRate: 200, lowX: 4.2, highX: 8.1, idle: 75, knee: 400, overRate: 1200, overGoodpt: 199},
		{guard: "db-atomic", rate: 50, e2eP50: 0.8, e2eP99: 2, reservedShare: 0.995, idle: 70, knee: 3200, kneeAtTop: true},
		{guard: "etcd", rate: 50, e2eP50: 6, e2eP99: 12, reservedShare: 1},
	}
	var b bytes.Buffer
	renderCost(&b, rows, "measured somewhere")
	got := b.String()
	for _, want := range []string{
		"| guard | reservation p50 ms | p99 ms | lock p50 ms | lock p99 ms | reserved at 50/s | CPU per reservation ms (marginal) | measured between /s | lab idle CPU ms/s | knee /s | goodput at 3× knee /s |",
		"| `redlock` | 2.50 | 9.00 | 1.20 | 6.00 | 100.0% | 2.34 | 100 and 200 (4.2× and 8.1× idle) | 75 | 400 | 199 of 1200 offered (17%) |",
		"| `db-atomic` | 0.80 | 2.00 | – | – | 99.5% | – | – | 70 | ≥ 3200 | not run |",
		"| `etcd` | 6.00 | 12.00 | – | – | 100.0% | – | – | – | none met the SLO | not run |",
		"CPU per reservation is marginal: the slope of every process's CPU",
		"≥: every step of that sweep met the SLO up to its bound",
		"\nmeasured somewhere\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("cost table lacks %q; got:\n%s", want, got)
		}
	}
	doc := "a\n" + CostBeginMarker + "\nold\n" + CostEndMarker + "\n" + BeginMarker + "\nkept\n" + EndMarker + "\n"
	out, err := replaceMarked([]byte(doc), []byte("| new |\n"), CostBeginMarker, CostEndMarker)
	if err != nil {
		t.Fatal(err)
	}
	if want := "a\n" + CostBeginMarker + "\n| new |\n" + CostEndMarker + "\n" + BeginMarker + "\nkept\n" + EndMarker + "\n"; string(out) != want {
		t.Errorf("replaceMarked: got %q, want %q", out, want)
	}
	if err := runCost([]string{"redlock=" + t.TempDir()}, "", "", &bytes.Buffer{}); err == nil {
		t.Error("runCost on a directory without runs: got nil error")
	}
}

// TestMarginalCPU: the slope between two runs leaves out what does not grow
// with the rate.
func TestMarginalCPU(t *testing.T) {
	run := func(rate, cpuPerRes, fixed float64) loadgen.Summary {
		// 10 s at rate, every reservation made: cpuPerRes ms each plus
		// fixed ms per second whatever the rate.
		n := int64(rate * 10)
		cpu := (float64(n)*cpuPerRes + fixed*10) / 1000
		return loadgen.Summary{DurationS: 10, Outcomes: map[string]int64{loadgen.Reserved.String(): n},
			GeneratorCPUS: cpu / 2, ProcessesCPUS: cpu / 2, CPUMsPerReserved: cpu * 1000 / float64(n)}
	}
	ms, lo, hi, _, _, ok := marginalCPU(run(100, 2.5, 80), run(300, 2.5, 80))
	if !ok || math.Abs(ms-2.5) > 1e-9 || lo != 100 || hi != 300 {
		t.Errorf("got %v ms between %v and %v/s (ok %t), want 2.5 between 100 and 300", ms, lo, hi, ok)
	}
	// At 100/s the whole CPU per reservation is 3.3 ms: the fixed 80 ms/s
	// is 0.8 of it, which the slope leaves out.
	if got := run(100, 2.5, 80).CPUMsPerReserved; math.Abs(got-3.3) > 1e-9 {
		t.Errorf("whole CPU per reservation %v, want 3.3", got)
	}
	lost := run(300, 2.5, 80)
	lost.CPUMsPerReserved = 0 // a watched process could not be read
	if _, _, _, _, _, ok := marginalCPU(run(100, 2.5, 80), lost); ok {
		t.Error("a run with a lost process gave a slope")
	}
	if _, _, _, _, _, ok := marginalCPU(run(300, 2.5, 80), run(100, 2.5, 80)); ok {
		t.Error("the high run below the low one gave a slope")
	}
}

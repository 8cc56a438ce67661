package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	}
	var b bytes.Buffer
	render(&b, rows, fl, "measured somewhere")
	got := b.String()
	for _, want := range []string{
		"| lab fronts | always | 400 | 0.60 | 8.00 | 2.60 | 0.55 | 398 | 380 (at 1200) | 95% | 3 s | 812 / 2310 | 1000 | 400/s = 40% |",
		"| direct to redis-server | always | 500 | 0.50 | 6.00 | 2.00 | – | 497 | 470 (at 1500) | 95% | not by the run's end | 812 / 2310 | 1000 | 500/s = 50% |",
		"Spike: 20 s at three times the knee, then half the knee;",
		"| lab fronts | everysec | none met the SLO | | | | | | | | | 812 / 2310 | 9000 | – |",
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
			"| direct to redis-server | everysec | none met the SLO | | | | | | | | | – | – | – |", false},
		{"a floor file not written", func(t *testing.T) string { return filepath.Join(t.TempDir(), "floor.json") },
			"| direct to redis-server | everysec | none met the SLO | | | | | | | | | – | – | – |", false},
		{"disk and fan-out", func(t *testing.T) string {
			return write(t, func(f *floor.File) {
				f.Disk = []floor.Disk{{Writers: 1, SyncsPerS: 700}, {Writers: 5, SyncsPerS: 2000}}
				f.Fanout = map[string]floor.Fanout{"everysec": {Nodes: 5, Workers: 64, LocksPerS: 12000}}
			})
		}, "| direct to redis-server | everysec | none met the SLO | | | | | | | | | 700 / 2000 | 12000 | – |", false},
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
		{guard: "redlock", rate: 50, e2eP50: 2.5, e2eP99: 9, acquireP50: 1.2, acqP99: 6, cpuPerReserved: 3.1, reservedShare: 1, knee: 400, overRate: 1200, overGoodpt: 199},
		{guard: "db-atomic", rate: 50, e2eP50: 0.8, e2eP99: 2, reservedShare: 0.995},
	}
	var b bytes.Buffer
	renderCost(&b, rows, "measured somewhere")
	got := b.String()
	for _, want := range []string{
		"| guard | reservation p50 ms | p99 ms | lock p50 ms | lock p99 ms | CPU per reservation ms | reserved at 50/s | knee /s | goodput at 3× knee /s |",
		"| `redlock` | 2.50 | 9.00 | 1.20 | 6.00 | 3.10 | 100.0% | 400 | 199 of 1200 offered (17%) |",
		"| `db-atomic` | 0.80 | 2.00 | – | – | – | 99.5% | none met the SLO | not run |",
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

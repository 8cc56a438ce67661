package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/testenv"
)

// hdrjsTag is what testdata/hdrjs/readhlog.js prints for one tag: raw
// histogram values (ns; attempts for Tag=attempts) and the percentile
// distribution hdr-histogram-js prints.
type hdrjsTag struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   int64   `json:"p50"`
	P90   int64   `json:"p90"`
	P99   int64   `json:"p99"`
	P999  int64   `json:"p999"`
	Max   int64   `json:"max"`
	Hgrm  string  `json:"hgrm"`
}

// hdrJS is node with hdr-histogram-js installed in testdata/hdrjs.
type hdrJS struct{ node, dir string }

// requireHdrJS ends the test by testenv.Missing (a failure under CI=true, a
// loud skip otherwise) when node or hdr-histogram-js is not there.
func requireHdrJS(t *testing.T) hdrJS {
	t.Helper()
	node := testenv.Require(t, "node")
	dir, err := filepath.Abs(filepath.Join("testdata", "hdrjs"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "hdr-histogram-js", "package.json")); err != nil {
		testenv.Missing(t, "hdr-histogram-js is not installed in loadgen/testdata/hdrjs: run `npm ci --prefix loadgen/testdata/hdrjs` (node and npm)")
	}
	return hdrJS{node: node, dir: dir}
}

// readHlog runs readhlog.js on a run directory's latency.hlog.
func (js hdrJS) readHlog(t *testing.T, dir string) map[string]hdrjsTag {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, js.node, filepath.Join(js.dir, "readhlog.js"), filepath.Join(dir, HlogFile), TagAttempts+"=1").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("readhlog.js: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("readhlog.js: %v", err)
	}
	var tags map[string]hdrjsTag
	if err := json.Unmarshal(out, &tags); err != nil {
		t.Fatalf("readhlog.js output: %v\n%.500s", err, out)
	}
	return tags
}

// TestHdrHistogramJSReadsWhatTheSummarySays reads a run's latency.hlog with
// hdr-histogram-js and checks that summary.json and every .hgrm say what the
// independent implementation says about the same histograms: for a short
// in-process load, and for a run of known samples.
func TestHdrHistogramJSReadsWhatTheSummarySays(t *testing.T) {
	js := requireHdrJS(t)
	t.Run("load", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		// 1760 operations: 99 % and 99.9 % of 1760 have a fraction below
		// one half, where rounding the rank and the reference's ceiling
		// part ways.
		executeRun(t, dir, runOpts{rate: 4400, d: 400 * time.Millisecond, lock: true})
		checkAgainstHdrJS(t, js, dir)
	})
	t.Run("known samples", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		writeKnownRun(t, dir)
		checkAgainstHdrJS(t, js, dir)
	})
}

// writeKnownRun records 1760 operations over two intervals, with values
// for which the value of rank round(p·N) and of rank ceil(p·N) lie in
// different buckets at p99 and p99.9, and renders the run's reports.
func writeKnownRun(t *testing.T, dir string) {
	t.Helper()
	w, err := CreateRun(dir, Meta{Command: "load --known-samples", Target: "inventory", Guard: "redlock",
		Nodes: []string{"127.0.0.1:7001", "127.0.0.1:7002"}, IntervalMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(1_700_000_000_123)
	set := NewHistSet(2)
	for iv := range 2 {
		for i := iv * 880; i < (iv+1)*880; i++ {
			set.Outcomes[Reserved]++
			// Distinct values, further apart near the top than the
			// buckets there are wide (130 µs against 66 µs for e2e).
			set.recordLatency(set.E2E, time.Duration(1000+i*i*37))
			set.recordLatency(set.E2EUncorrected, time.Duration(1000+i*i*29))
			// 1742 of 1 ms and 18 of 9 ms: p99 is 9 ms, rounding says 1 ms.
			acquire := time.Millisecond
			if i%98 == 0 {
				acquire = 9 * time.Millisecond
			}
			set.recordLatency(set.Acquire, acquire)
			set.recordLatency(set.Hold, time.Duration(500_000+(i*7919)%1760*1000))
			set.recordLatency(set.Release, time.Duration(200_000+(i*104_729)%1760*500))
			set.recordLatency(set.Nodes[0], time.Duration(100_000+i*i*11))
			set.recordLatency(set.Nodes[1], time.Duration(150_000+(i*31)%1760*300))
			attempts := 1 + (i*i)%7
			if i%500 == 499 {
				attempts = 14
			}
			_ = set.Attempts.RecordValue(int64(attempts))
		}
		ivStart := start.Add(time.Duration(iv) * time.Second)
		if err := w.Interval(&Interval{Index: iv, Start: ivStart, End: ivStart.Add(time.Second), Hists: set}); err != nil {
			t.Fatal(err)
		}
		set.Reset()
	}
	if err := w.Finish(Info{Start: start, End: start.Add(2 * time.Second), Planned: 1760, Scheduled: 1760}, Safety{}); err != nil {
		t.Fatal(err)
	}
	r, err := LoadReport(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Write(); err != nil {
		t.Fatal(err)
	}
}

// checkAgainstHdrJS compares a rendered run directory with what
// hdr-histogram-js reads from its latency.hlog.
func checkAgainstHdrJS(t *testing.T, hdrjs hdrJS, dir string) {
	t.Helper()
	js := hdrjs.readHlog(t, dir)
	var sum Summary
	if err := readJSON(filepath.Join(dir, SummaryFile), &sum); err != nil {
		t.Fatal(err)
	}
	want := map[string]Percentiles{
		TagE2E: sum.E2ELatencyMs, TagE2EUncorrected: sum.E2EUncorrectedLatencyMs,
		TagAcquire: sum.AcquireLatencyMs, TagHold: sum.HoldLatencyMs, TagRelease: sum.ReleaseLatencyMs,
	}
	for _, n := range sum.PerNode {
		want[NodeTag(n.Node-1)] = n.LatencyMs
	}
	tags := append(slices.Collect(maps.Keys(want)), TagAttempts)
	slices.Sort(tags)
	if got := slices.Sorted(maps.Keys(js)); !slices.Equal(got, tags) {
		t.Fatalf("hdr-histogram-js found tags %v, want %v", got, tags)
	}
	if sum.AcquireLatencyMs.Count == 0 || sum.Attempts.Count == 0 || len(sum.PerNode) == 0 {
		t.Fatalf("the run recorded no lock timings: %+v", sum)
	}
	for tag, p := range want {
		j := js[tag]
		got := Percentiles{Count: j.Count, P50: ms(j.P50), P90: ms(j.P90), P99: ms(j.P99), P999: ms(j.P999), Max: ms(j.Max), Mean: ms(int64(j.Mean))}
		if got != p {
			t.Errorf("%s: hdr-histogram-js reads %+v, summary.json says %+v", tag, got, p)
		}
	}
	a := js[TagAttempts]
	if a.Count != sum.Attempts.Count || a.P99 != sum.Attempts.P99 || a.Max != sum.Attempts.Max {
		t.Errorf("attempts: hdr-histogram-js reads count %d p99 %d max %d, summary.json says %+v", a.Count, a.P99, a.Max, sum.Attempts)
	}
	for _, tag := range tags {
		b, err := os.ReadFile(filepath.Join(dir, tag+".hgrm"))
		if err != nil {
			t.Fatal(err)
		}
		unit, body, _ := strings.Cut(string(b), "\n")
		if !strings.HasPrefix(unit, "#[Values in ") {
			t.Errorf("%s.hgrm: got first line %q, want the unit", tag, unit)
		}
		if body != js[tag].Hgrm {
			t.Errorf("%s.hgrm differs from hdr-histogram-js's outputPercentileDistribution:\n%s", tag, lineDiff(body, js[tag].Hgrm))
		}
	}
}

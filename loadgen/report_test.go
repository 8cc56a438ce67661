package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
)

// lockTarget imitates a Redlock-guarded service: lock timings on every
// reservation and per-node SET results into the recorder, some contention.
type lockTarget struct {
	rec   *Recorder
	nodes int
}

func (t *lockTarget) Do(_ context.Context, op Op) Result {
	r := rand.New(rand.NewPCG(op.Seq, 7))
	acq := time.Duration(200+r.IntN(3000)) * time.Microsecond
	res := Result{Outcome: Reserved, Lock: true, Acquire: acq, Hold: 300 * time.Microsecond, Release: 150 * time.Microsecond, Attempts: 1 + r.IntN(2)}
	if op.Seq%17 == 0 {
		res = Result{Outcome: Contended, Lock: true, Acquire: 5 * time.Millisecond, Attempts: 3}
	}
	nr := make([]NodeResult, t.nodes)
	for i := range nr {
		nr[i] = NodeResult{Node: i, Outcome: NodeGranted, Latency: time.Duration(100+50*i+r.IntN(200)) * time.Microsecond}
	}
	nr[t.nodes-1].Outcome = NodeAbandoned
	if op.Seq%5 == 0 { // node2 refuses now and then
		nr[1].Outcome, nr[1].Latency = NodeError, 30*time.Microsecond
	}
	t.rec.RecordNodes(nr)
	return res
}

func (t *lockTarget) Close() error { return nil }

type runOpts struct {
	rate     float64
	d        time.Duration
	shard    Shard
	lock     bool
	ths      []string
	interval time.Duration
}

func executeRun(t *testing.T, dir string, o runOpts) (*Report, []ThresholdResult) {
	t.Helper()
	if o.interval == 0 {
		o.interval = 100 * time.Millisecond
	}
	sched, err := ConstantSchedule(o.rate, o.d, o.shard)
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := ParseKeys("zipf:100:0.99")
	kg, err := NewKeyGen(ks, o.shard)
	if err != nil {
		t.Fatal(err)
	}
	nodes := 0
	var target Target = NoopTarget{}
	rec := NewRecorder(0, 0)
	meta := Meta{Target: "noop", Stages: FormatStages([]Stage{{o.d, o.rate}}), Keys: ks.String(), Worker: o.shard.String()}
	if o.lock {
		nodes = 3
		rec = NewRecorder(nodes, 0)
		target = &lockTarget{rec: rec, nodes: nodes}
		meta.Target, meta.Guard = "inventory", "redlock"
		meta.Nodes = []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}
	}
	var ths []Threshold
	for _, s := range o.ths {
		th, err := ParseThreshold(s)
		if err != nil {
			t.Fatal(err)
		}
		ths = append(ths, th)
	}
	r, failed, err := Execute(context.Background(), RunSpec{
		Out: dir, Meta: meta, Thresholds: ths,
		Engine: Config{Schedule: sched, Target: target, Keys: kg, Seed: 42, Interval: o.interval, Recorder: rec},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r, failed
}

func TestExecuteWritesEveryOutput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	r, failed := executeRun(t, dir, runOpts{rate: 1000, d: 400 * time.Millisecond, lock: true,
		ths: []string{"requests==400", "acquire.p99<1s", "safety.lost_updates==0", "outcomes.error==0", "node1.p99<1s", "node3.p99<1s"}})
	// node1 is the first lock node (its SETs granted); node3, the last, only
	// ever had its SET abandoned, so it has no latency samples.
	if len(failed) != 2 || failed[0].Expr != "safety.lost_updates==0" || failed[0].Got != "not checked" ||
		failed[1].Expr != "node3.p99<1s" || failed[1].Got != "no node3 samples" {
		t.Errorf("failed thresholds = %+v, want the unchecked safety one and node3's (no samples)", failed)
	}
	for _, f := range []string{MetaFile, IntervalsFile, HlogFile, SafetyFile, SummaryFile, TextFile, HTMLFile,
		"e2e.hgrm", "e2e_uncorrected.hgrm", "acquire.hgrm", "hold.hgrm", "release.hgrm", "attempts.hgrm", "node1.hgrm", "node3.hgrm"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v (size %v)", f, err, fi)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "node0.hgrm")); err == nil {
		t.Error("node0.hgrm written: nodes are numbered from 1")
	}
	// summary.json carries every field the issue names.
	var sum map[string]any
	b, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"requests", "duration_s", "throughput_per_s", "outcomes", "acquire_latency_ms", "e2e_latency_ms", "attempts", "per_node", "safety"} {
		if _, ok := sum[k]; !ok {
			t.Errorf("summary.json lacks %q", k)
		}
	}
	for _, k := range []string{"acquire_latency_ms", "e2e_latency_ms"} {
		m, _ := sum[k].(map[string]any)
		for _, q := range []string{"p50", "p90", "p99", "p999", "max"} {
			if _, ok := m[q]; !ok {
				t.Errorf("summary.json %s lacks %q", k, q)
			}
		}
	}
	if m, _ := sum["attempts"].(map[string]any); m["mean"] == nil || m["p99"] == nil {
		t.Errorf("summary.json attempts = %v, want mean and p99", m)
	}
	nodes, _ := sum["per_node"].([]any)
	if len(nodes) != 3 {
		t.Fatalf("per_node has %d nodes, want 3", len(nodes))
	}
	n0, _ := nodes[0].(map[string]any)
	if lat, _ := n0["latency_ms"].(map[string]any); lat["p99"] == nil || n0["outcomes"] == nil || n0["node"] != 1.0 {
		t.Errorf("per_node[0] = %v, want node 1 with latency percentiles and outcomes", n0)
	}
	if n2, _ := nodes[2].(map[string]any); n2["node"] != 3.0 {
		t.Errorf("per_node[2].node = %v, want 3", n2["node"])
	}
	sf, _ := sum["safety"].(map[string]any)
	for _, k := range []string{"double_grants", "lost_updates", "oversell", "fenced_rejections"} {
		if _, ok := sf[k]; !ok {
			t.Errorf("summary.json safety lacks %q", k)
		}
	}
	// The figures add up.
	s := r.Summary
	if s.Requests != 400 || s.Outcomes["reserved"]+s.Outcomes["contended"] != 400 || s.Outcomes["contended"] != 24 {
		t.Errorf("requests %d outcomes %v, want 400 with 24 contended", s.Requests, s.Outcomes)
	}
	if s.AcquireLatencyMs.Count != 400 || s.E2ELatencyMs.Count != 400 || s.Attempts.Count != 400 {
		t.Errorf("counts: acquire %d e2e %d attempts %d, want 400", s.AcquireLatencyMs.Count, s.E2ELatencyMs.Count, s.Attempts.Count)
	}
	if s.PerNode[2].Outcomes["abandoned"] != 400 || s.PerNode[2].LatencyMs.Count != 0 || s.PerNode[0].LatencyMs.Count != 400 {
		t.Errorf("node outcomes %v / counts %d %d", s.PerNode[2].Outcomes, s.PerNode[2].LatencyMs.Count, s.PerNode[0].LatencyMs.Count)
	}
	if s.AcquireLatencyMs.P50 <= 0 || s.AcquireLatencyMs.P99 < s.AcquireLatencyMs.P50 || s.AcquireLatencyMs.Max > 5.1 {
		t.Errorf("acquire percentiles %+v", s.AcquireLatencyMs)
	}
	txt, _ := os.ReadFile(filepath.Join(dir, TextFile))
	for _, want := range []string{"lock acquire", "p99.9", "node1 SET 127.0.0.1:7001", "node3 SET 127.0.0.1:7003", "node1 outcomes: granted 400", "node3 outcomes: granted 0 taken 0 error 0 timeout 0 abandoned 400", "threshold safety.lost_updates==0: FAIL"} {
		if !strings.Contains(string(txt), want) {
			t.Errorf("summary.txt lacks %q:\n%s", want, txt)
		}
	}
	hgrm, _ := os.ReadFile(filepath.Join(dir, "acquire.hgrm"))
	if !strings.Contains(string(hgrm), "       Value     Percentile TotalCount 1/(1-Percentile)\n") || !strings.Contains(string(hgrm), "Total count    =          400") {
		t.Errorf("acquire.hgrm is not a percentile spectrum:\n%.400s", hgrm)
	}
	// Re-rendering from the directory gives the same summary, judged by the
	// same thresholds.
	r2, err := LoadReport(dir)
	if err != nil {
		t.Fatal(err)
	}
	ths, err := r2.RecordedThresholds()
	if err != nil || len(ths) != 6 || ths[0].Expr != "requests==400" {
		t.Errorf("recorded thresholds = %v, %v", ths, err)
	}
	// The node histograms read back from latency.hlog under the same numbers.
	if f2 := r2.Judge(ths); len(f2) != 2 || f2[1].Expr != "node3.p99<1s" || f2[1].Got != "no node3 samples" {
		t.Errorf("re-judged failures = %+v, want the same two", f2)
	}
	if r2.Totals.Nodes[0].TotalCount() != 400 || len(r2.Totals.Nodes) != 3 {
		t.Errorf("reloaded node histograms: %d nodes, first %d samples; want 3, 400", len(r2.Totals.Nodes), r2.Totals.Nodes[0].TotalCount())
	}
	if r2.Summary.Requests != s.Requests || r2.Summary.AcquireLatencyMs != s.AcquireLatencyMs || r2.Summary.E2ELatencyMs != s.E2ELatencyMs {
		t.Errorf("reloaded summary differs: got %+v, want %+v", r2.Summary.AcquireLatencyMs, s.AcquireLatencyMs)
	}
	if _, err := CreateRun(dir, Meta{}); err == nil {
		t.Error("CreateRun over an existing run: got nil error")
	}
}

func TestHlogRoundTripsThroughTheLibraryReader(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, HlogFile)
	start := time.UnixMilli(1_700_000_000_123)
	w, err := createHlog(path, start, "test")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*hdr.Histogram{}
	set := NewHistSet(2)
	for i := 0; i < 3; i++ {
		for j := 0; j < 100*(i+1); j++ {
			set.recordLatency(set.E2E, time.Duration(j)*time.Millisecond)
			set.recordLatency(set.Acquire, time.Duration(j)*time.Microsecond)
			set.recordLatency(set.Nodes[1], time.Duration(j+i)*time.Microsecond)
			_ = set.Attempts.RecordValue(int64(1 + j%4))
		}
		for _, tg := range set.Tagged() {
			if want[tg.Tag] == nil {
				want[tg.Tag] = newLatencyHist()
			}
			want[tg.Tag].Merge(tg.Hist)
		}
		ivStart := start.Add(time.Duration(i) * time.Second)
		if err := w.write(set, ivStart, ivStart.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		set.Reset()
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd := hdr.NewHistogramLogReader(f)
	got := map[string]*hdr.Histogram{}
	n := 0
	for {
		h, err := rd.NextIntervalHistogram()
		if err != nil {
			t.Fatal(err)
		}
		if h == nil {
			break
		}
		idx := n / len(set.Tagged())
		if ws := start.Add(time.Duration(idx) * time.Second).UnixMilli(); h.StartTimeMs() < ws-1 || h.StartTimeMs() > ws+1 {
			t.Errorf("entry %d (%s) starts at %d, want %d ± 1ms", n, h.Tag(), h.StartTimeMs(), ws)
		}
		if got[h.Tag()] == nil {
			got[h.Tag()] = newLatencyHist()
		}
		got[h.Tag()].Merge(h)
		n++
	}
	if n != 3*len(set.Tagged()) {
		t.Errorf("read %d interval histograms, want %d", n, 3*len(set.Tagged()))
	}
	for tag, wh := range want {
		gh := got[tag]
		if gh == nil || !gh.Equals(wh) {
			t.Errorf("tag %s: round trip differs (got %v, want count %d)", tag, gh, wh.TotalCount())
		}
	}
	if got[TagE2E].TotalCount() != 600 || got["node2"].TotalCount() != 600 || got["node0"] != nil {
		t.Errorf("e2e count %d node2 (Nodes[1]) %d, want 600; tags %v", got[TagE2E].TotalCount(), got["node2"].TotalCount(), slices.Sorted(maps.Keys(got)))
	}
}

func TestMergeRunsFromTwoWorkers(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	ra, _ := executeRun(t, a, runOpts{rate: 1000, d: 300 * time.Millisecond, shard: Shard{0, 2}, lock: true})
	rb, _ := executeRun(t, b, runOpts{rate: 1000, d: 300 * time.Millisecond, shard: Shard{1, 2}, lock: true})
	if ra.Summary.Requests != 150 || rb.Summary.Requests != 150 {
		t.Fatalf("workers ran %d and %d, want 150 each", ra.Summary.Requests, rb.Summary.Requests)
	}
	// Both hold a copy of the lab's fault log, taken at different moments:
	// the merged run has each fault once, ended if any copy saw its end.
	kill := faultlog.Fault{ID: "n1-kill", Node: 1, Kind: "kill", Start: ra.Meta.Started.Add(100 * time.Millisecond)}
	appendFaults(t, a, kill)
	kill.End = kill.Start.Add(100 * time.Millisecond)
	appendFaults(t, b, kill, faultlog.Fault{ID: "n2-pause", Node: 2, Kind: "pause", Start: kill.End})
	out := filepath.Join(root, "merged")
	if err := Merge([]string{a, b}, out, nil); err != nil {
		t.Fatal(err)
	}
	r, err := LoadReport(out)
	if err != nil {
		t.Fatal(err)
	}
	s := r.Summary
	if s.Requests != 300 || s.AcquireLatencyMs.Count != 300 || s.E2ELatencyMs.Count != 300 {
		t.Errorf("merged: %d requests, %d acquire, %d e2e samples; want 300", s.Requests, s.AcquireLatencyMs.Count, s.E2ELatencyMs.Count)
	}
	if s.PerNode[0].LatencyMs.Count != 300 || s.Outcomes["contended"] != ra.Summary.Outcomes["contended"]+rb.Summary.Outcomes["contended"] {
		t.Errorf("merged per-node count %d, contended %d", s.PerNode[0].LatencyMs.Count, s.Outcomes["contended"])
	}
	want := hdr.New(latencyLowest, latencyHighest, sigFigs)
	want.Merge(ra.Totals.Acquire)
	want.Merge(rb.Totals.Acquire)
	if !r.Totals.Acquire.Equals(want) {
		t.Errorf("merged acquire histogram differs from the sum of the two")
	}
	if len(r.Faults) != 2 || r.Faults[0].Name() != "kill node1" || r.Faults[0].Active() || !r.Faults[1].Active() || len(r.Meta.Sources) != 2 {
		t.Errorf("faults %+v sources %v; want kill node1 ended, pause node2 open, 2 sources", r.Faults, r.Meta.Sources)
	}
	if failed := r.Judge([]Threshold{mustThreshold(t, "requests==300"), mustThreshold(t, "acquire.p99<1ms")}); len(failed) != 1 || failed[0].Expr != "acquire.p99<1ms" {
		t.Errorf("judged merged run: failed %+v, want only acquire.p99<1ms", failed)
	}
	if err := r.Write(); err != nil {
		t.Fatal(err)
	}
}

func mustThreshold(t *testing.T, s string) Threshold {
	t.Helper()
	th, err := ParseThreshold(s)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

func TestSweepFindsTheKnee(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sweep")
	var logBuf bytes.Buffer
	sw, err := RunSweep(context.Background(), SweepSpec{
		Out: out, Rates: []float64{500, 1000, 2000, 4000},
		// Stands in for a latency SLO: at 200 ms per step, more than 250
		// operations means the rate was above 1250/s.
		SLO: []Threshold{mustThreshold(t, "requests<=250")},
		Step: func(ctx context.Context, rate float64, dir string) (*Report, error) {
			r, _ := executeRun(t, dir, runOpts{rate: rate, d: 200 * time.Millisecond, lock: true})
			return r, nil
		},
		Log: &logBuf,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sw.Knee != 1000 || len(sw.Steps) != 3 || sw.Steps[2].Pass || !sw.Steps[1].Pass {
		t.Errorf("knee %v after %d steps (%+v), want 1000 after 3 (stops at the first miss)", sw.Knee, len(sw.Steps), sw.Steps)
	}
	txt, _ := os.ReadFile(filepath.Join(out, TextFile))
	if !strings.Contains(string(txt), "knee: 1000/s") || !strings.Contains(logBuf.String(), "2000/s achieved") {
		t.Errorf("sweep text:\n%s\nlog:\n%s", txt, logBuf.String())
	}
	if !IsSweep(out) {
		t.Error("IsSweep = false")
	}
	if err := RenderSweep(out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, sw.Steps[0].Dir, HTMLFile)); err != nil {
		t.Error(err)
	}
	back, err := LoadSweep(out)
	if err != nil {
		t.Fatal(err)
	}
	if back.Knee != sw.Knee || len(back.Steps) != len(sw.Steps) || back.Steps[1].Dir != sw.Steps[1].Dir {
		t.Errorf("LoadSweep: got knee %v and steps %+v, want knee %v and steps %+v", back.Knee, back.Steps, sw.Knee, sw.Steps)
	}
}

func TestSweepUntilMiss(t *testing.T) {
	// Stands in for a latency SLO: at 200 ms per step, more than 250
	// operations means the rate was above 1250/s.
	step := func(ctx context.Context, rate float64, dir string) (*Report, error) {
		r, _ := executeRun(t, dir, runOpts{rate: rate, d: 200 * time.Millisecond, lock: true})
		return r, nil
	}
	for _, tc := range []struct {
		name        string
		spec        SweepSpec
		wantRates   []float64
		wantKnee    float64
		wantBounded bool
	}{
		{"goes on past the list until a miss", SweepSpec{Rates: []float64{250, 500}, UntilMiss: true},
			[]float64{250, 500, 1000, 2000}, 1000, true},
		{"refines between the knee and the miss", SweepSpec{Rates: []float64{250, 500}, UntilMiss: true, Refine: true},
			[]float64{250, 500, 1000, 2000, 1400}, 1000, true},
		{"a refining step that meets the SLO raises the knee", SweepSpec{Rates: []float64{300, 600}, UntilMiss: true, Growth: 3, Refine: true},
			[]float64{300, 600, 1800, 1000}, 1000, true},
		{"stops at MaxRate, unbounded", SweepSpec{Rates: []float64{250}, UntilMiss: true, MaxRate: 600},
			[]float64{250, 500}, 500, false},
		{"the listed rates only, without UntilMiss", SweepSpec{Rates: []float64{250, 500}},
			[]float64{250, 500}, 500, false},
		{"a missed step runs again once", SweepSpec{Rates: []float64{250, 500}, UntilMiss: true, RetryMissed: true},
			[]float64{250, 500, 500, 1000, 2000, 2000}, 1000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.Out = filepath.Join(t.TempDir(), "sweep")
			spec.SLO = []Threshold{mustThreshold(t, "requests<=250")}
			spec.Step = step
			if spec.RetryMissed {
				// The first run at 500/s stalls: three times as long, so
				// three times the operations.
				stalled := false
				spec.Step = func(ctx context.Context, rate float64, dir string) (*Report, error) {
					d := 200 * time.Millisecond
					if rate == 500 && !stalled {
						stalled, d = true, 600*time.Millisecond
					}
					r, _ := executeRun(t, dir, runOpts{rate: rate, d: d, lock: true})
					return r, nil
				}
			}
			sw, err := RunSweep(context.Background(), spec, nil)
			if err != nil {
				t.Fatal(err)
			}
			var rates []float64
			for _, s := range sw.Steps {
				rates = append(rates, s.Rate)
			}
			if !slices.Equal(rates, tc.wantRates) || sw.Knee != tc.wantKnee || sw.Bounded != tc.wantBounded {
				t.Errorf("got rates %v, knee %v, bounded %t; want %v, %v, %t", rates, sw.Knee, sw.Bounded, tc.wantRates, tc.wantKnee, tc.wantBounded)
			}
			txt, _ := os.ReadFile(filepath.Join(spec.Out, TextFile))
			if want := "at least"; strings.Contains(string(txt), want) == tc.wantBounded {
				t.Errorf("summary.txt says %q: %t, want %t:\n%s", want, !tc.wantBounded, !tc.wantBounded, txt)
			}
		})
	}
}

func TestRoundRate(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{
		{1414.2, 1400}, {2828.4, 2800}, {707.1, 710}, {99.4, 99}, {5.55, 5.6}, {12345, 12000},
	} {
		if got := roundRate(tc.in); got != tc.want {
			t.Errorf("roundRate(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

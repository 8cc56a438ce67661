package loadgen

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

func TestPercentileRankIsTheReferenceCeilingRank(t *testing.T) {
	for _, tc := range []struct {
		p    float64
		n    int64
		want int64
	}{
		{99.9, 1700, 1699},   // 1698.3: round gives 1698
		{99, 1760, 1743},     // 1742.4: round gives 1742
		{10, 12, 2},          // 1.2: round gives 1
		{99.9, 41000, 40959}, // exactly; 99.9·41000/100 is 40959.00000000001 in floating point
		{99.9, 1000, 999},
		{99.99, 10000, 9999},
		{50, 4, 2},
		{50, 5, 3},
		{0, 10, 1}, // at least the first value
		{0.01, 10, 1},
		{100, 10, 10},
		{150, 10, 10}, // clamped to 100
		{-5, 10, 1},
		{math.NaN(), 10, 1},
		{50, 1, 1},
	} {
		if got := percentileRank(tc.p, tc.n); got != tc.want {
			t.Errorf("percentileRank(%v, %d): got %d, want %d", tc.p, tc.n, got, tc.want)
		}
	}
}

// rankHistogram holds 1698 values of 1 ms and 2 of 9 ms: the value of rank
// 1699 (ceil(99.9 % of 1700)) is 9 ms, the one of rank 1698
// (round(99.9 % of 1700)) 1 ms.
func rankHistogram(t *testing.T) *hdr.Histogram {
	t.Helper()
	h := newLatencyHist()
	if err := h.RecordValues(1_000_000, 1698); err != nil {
		t.Fatal(err)
	}
	if err := h.RecordValues(9_000_000, 2); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestAtPercentileReportsTheBucketOfTheCeilingRank(t *testing.T) {
	h := rankHistogram(t)
	// 1 ms falls in [999936, 1000447] (512 ns sub-buckets), 9 ms in
	// [8994816, 9003007] (8192 ns): HdrHistogram reports the highest value
	// of the bucket, the lowest for p0.
	for _, tc := range []struct {
		p    float64
		want int64
	}{
		{0, 999_936},
		{50, 1_000_447},
		{99.88, 1_000_447}, // rank 1698
		{99.9, 9_003_007},  // rank 1699
		{100, 9_003_007},
	} {
		if got := atPercentile(h, tc.p); got != tc.want {
			t.Errorf("atPercentile(p%v): got %d, want %d", tc.p, got, tc.want)
		}
	}
	// The library's own rule is the one this replaces.
	if lib := h.ValueAtQuantile(99.9); lib != 1_000_447 {
		t.Errorf("hdrhistogram-go ValueAtQuantile(99.9): got %d, want its round-rank 1000447 (if it now agrees, atPercentile may defer to it)", lib)
	}
	got := atPercentiles(h, 99.9, 50, 0)
	if got[0] != 9_003_007 || got[1] != 1_000_447 || got[2] != 999_936 {
		t.Errorf("atPercentiles(99.9, 50, 0): got %v, want [9003007 1000447 999936]", got)
	}
	if got := atPercentiles(newLatencyHist(), 50, 100); got[0] != 0 || got[1] != 0 {
		t.Errorf("atPercentiles of an empty histogram: got %v, want zeros", got)
	}
}

func TestEveryReportUsesTheCeilingRank(t *testing.T) {
	h := rankHistogram(t)
	if p := percentilesOf(h); p.P999 != 9.003 || p.P50 != 1 || p.Count != 1700 {
		t.Errorf("summary percentiles: got %+v, want p999 9.003, p50 1, count 1700", p)
	}
	th, err := ParseThreshold("acquire.p999<5ms")
	if err != nil {
		t.Fatal(err)
	}
	set := NewHistSet(0)
	set.Acquire = h
	r := &Report{Totals: set}
	if res := Evaluate(th, r); res.Pass || res.Got != "9.003ms" {
		t.Errorf("acquire.p999<5ms: got pass=%v (%s), want a failure at 9.003ms", res.Pass, res.Got)
	}
	m := NewMetrics()
	if err := m.Interval(&Interval{Hists: set}); err != nil {
		t.Fatal(err)
	}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	// The Prometheus histogram carries the same samples, so a
	// histogram_quantile over it sees them too: the 1698 of 1 ms in the
	// le=2ms bucket, the two of 9 ms only from le=10ms.
	buckets := map[float64]uint64{}
	for _, f := range families {
		if f.GetName() != "redlab_load_latency_seconds" {
			continue
		}
		for _, mt := range f.GetMetric() {
			if mt.GetLabel()[0].GetValue() != TagAcquire {
				continue
			}
			for _, b := range mt.GetHistogram().GetBucket() {
				buckets[b.GetUpperBound()] = b.GetCumulativeCount()
			}
		}
	}
	if buckets[0.002] != 1698 || buckets[0.0075] != 1698 || buckets[0.01] != 1700 {
		t.Errorf("redlab_load_latency_seconds{histogram=acquire} buckets le=2ms, 7.5ms, 10ms: got %d, %d, %d; want 1698, 1698, 1700",
			buckets[0.002], buckets[0.0075], buckets[0.01])
	}
	// 1742 values of 1 ms and 18 of 9 ms: p99 is rank 1743 (9 ms), where
	// rounding takes rank 1742 (1 ms).
	set.Acquire = newLatencyHist()
	_ = set.Acquire.RecordValues(1_000_000, 1742)
	_ = set.Acquire.RecordValues(9_000_000, 18)
	var status strings.Builder
	if err := newStatusLine(&status, false, r.Meta.Started).Interval(&Interval{Hists: set}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status.String(), "acquire p50 1.00ms p99 9.00ms") {
		t.Errorf("status line: got %q, want acquire p50 1.00ms p99 9.00ms", status.String())
	}
}

func TestPercentileDistributionStepsLikeJava(t *testing.T) {
	h := newLatencyHist()
	for i := int64(1); i <= 100_000; i++ {
		_ = h.RecordValue(i * 1000)
	}
	steps := percentileDistribution(h, 5)
	// Ten ticks to 50 %, then each half of what is left gets five.
	want := []float64{0, 10, 20, 30, 40, 50, 55, 60, 65, 70, 75, 77.5, 80, 82.5, 85, 87.5, 88.75, 90}
	for i, w := range want {
		if i >= len(steps) || steps[i].Level != w {
			t.Fatalf("step %d: got %+v, want level %v (steps %v)", i, steps[min(i, len(steps)-1)], w, steps[:min(len(steps), len(want))])
		}
	}
	last := steps[len(steps)-1]
	if last.Level != 100 || last.Count != 100_000 || last.Value != h.Max() {
		t.Errorf("last step: got %+v, want level 100, count 100000, value %d", last, h.Max())
	}
	for i := 1; i < len(steps); i++ {
		if steps[i].Level <= steps[i-1].Level || steps[i].Count < steps[i-1].Count {
			t.Fatalf("steps %d and %d do not rise: %+v, %+v", i-1, i, steps[i-1], steps[i])
		}
	}
	if steps := percentileDistribution(newLatencyHist(), 5); steps != nil {
		t.Errorf("empty histogram: got %v, want no steps", steps)
	}
}

func TestFormatFixedRoundsLikeJava(t *testing.T) {
	// The Java column (String.format(Locale.US, "%.Nf", x)) was checked
	// against JDK 17; Go's %f gives 0.12 and 1.00 for the first two.
	for _, tc := range []struct {
		x    float64
		prec int
		want string
	}{
		{0.125, 2, "0.13"},
		{1.005, 2, "1.01"},
		{2.0005, 3, "2.001"},
		{0.9998779296875, 12, "0.999877929688"},
		{9.9999, 3, "10.000"},
		{0, 3, "0.000"},
		{1, 12, "1.000000000000"},
		{1.1111111111111112, 2, "1.11"},
		{1024, 2, "1024.00"},
		{3024.093183, 3, "3024.093"},
		{1e21, 3, "1000000000000000000000.000"},
		{-0.125, 2, "-0.13"},
		{7.5, 0, "8"},
		{math.Inf(1), 2, "Infinity"},
	} {
		if got := formatFixed(tc.x, tc.prec); got != tc.want {
			t.Errorf("formatFixed(%v, %d): got %q, want %q", tc.x, tc.prec, got, tc.want)
		}
	}
}

// goldenHistograms records the values testdata/hgrm/Golden.java records.
func goldenHistograms(t *testing.T) map[string]struct {
	h     *hdr.Histogram
	scale float64
} {
	t.Helper()
	latency := newLatencyHist()
	for i := int64(0); i < 10_000; i++ {
		if err := latency.RecordValue(1000 + (i*i*7919+i*104_729)%50_000_000); err != nil {
			t.Fatal(err)
		}
	}
	if err := latency.RecordValue(17); err != nil {
		t.Fatal(err)
	}
	if err := latency.RecordValues(3_000_000_000, 3); err != nil {
		t.Fatal(err)
	}
	attempts := newAttemptsHist()
	for i := int64(0); i < 1000; i++ {
		if err := attempts.RecordValue(1 + (i*i)%7); err != nil {
			t.Fatal(err)
		}
	}
	if err := attempts.RecordValue(14); err != nil {
		t.Fatal(err)
	}
	return map[string]struct {
		h     *hdr.Histogram
		scale float64
	}{
		"latency":  {latency, 1e6},
		"attempts": {attempts, 1},
		"empty":    {newLatencyHist(), 1e6},
	}
}

func TestHgrmIsByteForByteJavas(t *testing.T) {
	for name, g := range goldenHistograms(t) {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("testdata", "hgrm", name+".hgrm"))
			if err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			if err := formatHgrm(&got, g.h, g.scale); err != nil {
				t.Fatal(err)
			}
			if got.String() != string(want) {
				t.Errorf("formatHgrm differs from Java's outputPercentileDistribution:\n%s", lineDiff(got.String(), string(want)))
			}
		})
	}
}

func TestHgrmFileNamesItsUnit(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, unit, line string
	}{
		{"latency", "milliseconds (recorded in nanoseconds, divided by 1000000)", "#[Values in milliseconds (recorded in nanoseconds, divided by 1000000)]"},
		{"attempts", "lock acquire attempts per acquire (a count, not a time)", "#[Values in lock acquire attempts per acquire (a count, not a time)]"},
	} {
		g := goldenHistograms(t)[tc.name]
		path := filepath.Join(dir, tc.name+".hgrm")
		if err := writeHgrm(path, g.h, g.scale, tc.unit); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		first, rest, _ := strings.Cut(string(b), "\n")
		want, _ := os.ReadFile(filepath.Join("testdata", "hgrm", tc.name+".hgrm"))
		if first != tc.line || rest != string(want) {
			t.Errorf("%s.hgrm: got first line %q and a body equal to Java's: %v; want %q and true", tc.name, first, rest == string(want), tc.line)
		}
	}
}

// lineDiff shows the first lines where got and want differ.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(g), len(w)) && shown < 5; i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			b.WriteString("line " + strconv.Itoa(i+1) + ":\n  got  " + strings.ReplaceAll(gl, "\t", `\t`) + "\n  want " + wl + "\n")
			shown++
		}
	}
	return b.String()
}

package loadgen

import (
	"strings"
	"testing"
	"time"
)

func TestParseThreshold(t *testing.T) {
	for _, tc := range []struct {
		in     string
		metric string
		op     string
		value  float64
		err    string
	}{
		{"acquire.p99<20ms", "acquire.p99", "<", float64(20 * time.Millisecond), ""},
		{"e2e.p999<=1s", "e2e.p999", "<=", float64(time.Second), ""},
		{" e2e_uncorrected.max < 250us ", "e2e_uncorrected.max", "<", float64(250 * time.Microsecond), ""},
		{"node2.p50>=1ms", "node2.p50", ">=", float64(time.Millisecond), ""},
		{"node1.p99<5ms", "node1.p99", "<", float64(5 * time.Millisecond), ""},
		{"node0.p99<5ms", "", "", 0, "numbered from 1"},
		{"node01.p99<5ms", "", "", 0, "numbered from 1"},
		{"node.p99<5ms", "", "", 0, "numbered from 1"},
		{"hold.p99.99<5ms", "hold.p99.99", "<", float64(5 * time.Millisecond), ""},
		{"release.mean<1ms", "release.mean", "<", float64(time.Millisecond), ""},
		{"safety.lost_updates==0", "safety.lost_updates", "==", 0, ""},
		{"safety.double_grants!=0", "safety.double_grants", "!=", 0, ""},
		{"outcomes.error<10", "outcomes.error", "<", 10, ""},
		{"outcomes.late<1%", "outcomes.late", "<", 0.01, ""},
		{"throughput>=500", "throughput", ">=", 500, ""},
		{"attempts.p99<=3", "attempts.p99", "<=", 3, ""},
		{"late_starts<0.5%", "late_starts", "<", 0.005, ""},
		{"version_conflicts>0", "version_conflicts", ">", 0, ""},
		{"outcomes.version_conflict<1%", "outcomes.version_conflict", "<", 0.01, ""},
		{"acquire.p99<20", "", "", 0, "give a unit"},
		{"acquire.p42x<1ms", "", "", 0, "unknown statistic"},
		{"acquire.p0<1ms", "", "", 0, "unknown statistic"},
		{"safety.lost<1", "", "", 0, "unknown safety metric"},
		{"outcomes.timeout<1", "", "", 0, "unknown outcome"},
		{"latency<1ms", "", "", 0, "unknown metric"},
		{"throughput>=5%", "", "", 0, "% value applies"},
		{"throughput>=fast", "", "", 0, "not a number"},
		{"acquire.p99 = 20ms", "", "", 0, "want METRIC OP VALUE"},
		{"", "", "", 0, "want METRIC OP VALUE"},
	} {
		got, err := ParseThreshold(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseThreshold(%q) error = %v, want one mentioning %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseThreshold(%q): %v", tc.in, err)
			continue
		}
		if got.Metric != tc.metric || got.Op != tc.op || got.Value != tc.value {
			t.Errorf("ParseThreshold(%q) = %s %s %v, want %s %s %v", tc.in, got.Metric, got.Op, got.Value, tc.metric, tc.op, tc.value)
		}
	}
}

func TestThresholdEval(t *testing.T) {
	r := &Report{Totals: NewHistSet(2)}
	r.Totals.recordLatency(r.Totals.Nodes[0], time.Millisecond)
	for i := 1; i <= 100; i++ {
		r.Totals.recordLatency(r.Totals.Acquire, time.Duration(i)*time.Millisecond)
		_ = r.Totals.Attempts.RecordValue(int64(1 + i%2))
	}
	r.Summary = Summary{
		Requests: 200, ThroughputPerS: 480.5, LateStarts: 3, VersionConflicts: 7,
		Outcomes: map[string]int64{"reserved": 180, "error": 4, "late": 16},
		Safety:   Safety{LostUpdates: 2, AuditChecked: true},
	}
	for _, tc := range []struct {
		expr string
		pass bool
		got  string
	}{
		{"acquire.p50<=51ms", true, "50.004ms"},
		{"acquire.p99<99ms", false, "99.025ms"},
		{"acquire.max<=101ms", true, "100.008ms"},
		{"acquire.min>0s", true, "1ms"},
		{"e2e.p99<1s", false, "no e2e samples"},
		{"node1.max>=1ms", true, "1ms"}, // node1 is the first node, Nodes[0]
		{"node2.p99<1s", false, "no node2 samples"},
		{"node3.p99<1s", false, "no node3 samples"},
		{"attempts.max<=2", true, "2"},
		{"outcomes.error<5", true, "4"},
		{"outcomes.late<5%", false, "8.000%"},
		{"outcomes.late<=8%", true, "8.000%"},
		{"late_starts<2", false, "3"},
		{"throughput>=500", false, "480.5"},
		{"requests==200", true, "200"},
		{"version_conflicts>0", true, "7"},
		{"safety.lost_updates==0", false, "2"},
		{"safety.oversell==0", true, "0"},
		{"safety.double_grants==0", false, "not checked"},
	} {
		res := Evaluate(mustThreshold(t, tc.expr), r)
		if res.Pass != tc.pass || res.Got != tc.got {
			t.Errorf("%s: got pass=%v (%s), want pass=%v (%s)", tc.expr, res.Pass, res.Got, tc.pass, tc.got)
		}
	}
	failed := r.Judge([]Threshold{mustThreshold(t, "requests==200"), mustThreshold(t, "outcomes.error==0")})
	if len(failed) != 1 || failed[0].Expr != "outcomes.error==0" || len(r.Summary.Thresholds) != 2 {
		t.Errorf("Judge: failed %+v, summary thresholds %+v", failed, r.Summary.Thresholds)
	}
}

// TestParseMetricAndComparison: the two halves of a threshold parse on their
// own, with the threshold's rules.
func TestParseMetricAndComparison(t *testing.T) {
	for name, latency := range map[string]bool{"acquire.p99": true, "node3.max": true, "outcomes.unavailable": false, "safety.lock_violations": false, "throughput": false} {
		m, err := ParseMetric(name)
		if err != nil || m.IsLatency() != latency || m.Name != name {
			t.Errorf("ParseMetric(%q) = %+v, %v; want latency %v", name, m, err, latency)
		}
	}
	if m, _ := ParseMetric("safety.double_grants"); !m.IsSafety() {
		t.Error("safety.double_grants is not a safety count")
	}
	for _, bad := range []string{"acquire", "outcomes.nope", "node0.p99", "grants"} {
		if _, err := ParseMetric(bad); err == nil {
			t.Errorf("ParseMetric(%q): want an error", bad)
		}
	}
	for _, tc := range []struct {
		in      string
		latency bool
		want    Comparison
	}{{">=1", false, Comparison{Op: ">=", Value: 1}}, {" == 0 ", false, Comparison{Op: "==", Value: 0}}, {"<2s", true, Comparison{Op: "<", Value: float64(2 * time.Second)}}} {
		if got, err := ParseComparison(tc.in, tc.latency); err != nil || got != tc.want {
			t.Errorf("ParseComparison(%q, %v) = %+v, %v; want %+v", tc.in, tc.latency, got, err, tc.want)
		}
	}
	for _, bad := range []struct {
		in      string
		latency bool
	}{{"<2", true}, {"<2s", false}, {"=1", false}, {"1", false}} {
		if _, err := ParseComparison(bad.in, bad.latency); err == nil {
			t.Errorf("ParseComparison(%q, %v): want an error", bad.in, bad.latency)
		}
	}
	if c := (Comparison{Op: "<=", Value: 3}); !c.Holds(3) || c.Holds(3.5) {
		t.Error("<=3 judged wrong")
	}
	for _, head := range MetricHeads() {
		if _, err := ParseMetric(head); err == nil {
			continue // a metric of one word
		}
		if _, err := ParseMetric(head + ".p99"); err != nil && !strings.Contains(err.Error(), "unknown safety") && !strings.Contains(err.Error(), "unknown outcome") {
			t.Errorf("metric head %q: %v", head, err)
		}
	}
}

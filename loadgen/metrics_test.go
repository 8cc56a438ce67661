package loadgen

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetrics(t *testing.T) {
	m := NewMetrics()
	h := NewHistSet(2)
	h.Outcomes[Reserved], h.Outcomes[Late], h.LateStarts = 7, 2, 1
	h.recordLatency(h.Acquire, 3*time.Millisecond)
	h.recordLatency(h.E2E, 5*time.Millisecond)
	h.NodeOutcomes[1][NodeTimeout] = 4
	iv := &Interval{Hists: h, InFlight: 3, TargetRate: 100, DoubleGrants: 2, LockViolations: 1}
	for i := 0; i < 2; i++ {
		if err := m.Interval(iv); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"reserved", testutil.ToFloat64(m.ops.WithLabelValues("reserved")), 14},
		{"late", testutil.ToFloat64(m.ops.WithLabelValues("late")), 4},
		{"late starts", testutil.ToFloat64(m.lateStarts), 2},
		{"in flight", testutil.ToFloat64(m.inFlight), 3},
		{"double grants (a running total in, a counter out)", testutil.ToFloat64(m.doubleGrants), 2},
		{"lock violations (likewise)", testutil.ToFloat64(m.lockViolations), 1},
		{"node timeouts (Nodes[1] is node 2)", testutil.ToFloat64(m.nodeSets.WithLabelValues("2", "timeout")), 8},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// The histograms replay every sample of every interval: two acquires
	// of 3ms, two e2e of 5ms, nothing for the tags without samples.
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "redlab_load_latency_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			hist := mt.GetHistogram()
			got[mt.GetLabel()[0].GetValue()] = [2]float64{float64(hist.GetSampleCount()), hist.GetSampleSum()}
			if len(hist.GetBucket()) == 0 || len(hist.GetPositiveSpan()) == 0 {
				t.Errorf("latency %s: want classic and native buckets, got %d classic, %d spans", mt.GetLabel()[0].GetValue(), len(hist.GetBucket()), len(hist.GetPositiveSpan()))
			}
		}
	}
	if len(got) != 2 {
		t.Errorf("latency histograms: got %v, want acquire and e2e only", got)
	}
	for tag, want := range map[string]float64{"acquire": 0.006, "e2e": 0.010} {
		if c, sum := got[tag][0], got[tag][1]; c != 2 || sum < want*0.999 || sum > want*1.001 {
			t.Errorf("latency %s: got count %v sum %v, want 2 and %v (within HDR's 0.1%%)", tag, c, sum, want)
		}
	}
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, stop, err := m.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `redlab_load_operations_total{outcome="reserved"} 14`) {
		t.Errorf("/metrics lacks the operations counter:\n%.600s", body)
	}
	stop()
	stop() // idempotent
}

// TestMetricsOnASharedRegistry: generators of several guards in one process
// (a drill) each register on a wrapped registerer and are served together.
func TestMetricsOnASharedRegistry(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	var ms []*Metrics
	for _, g := range []string{"redlock", "redlock-fenced"} {
		m, err := NewMetricsOn(prometheus.WrapRegistererWith(prometheus.Labels{"guard": g}, reg))
		if err != nil {
			t.Fatalf("NewMetricsOn for %s: %v", g, err)
		}
		ms = append(ms, m)
	}
	if _, err := NewMetricsOn(reg); err == nil {
		t.Error("NewMetricsOn without the guard label beside ones with it: got no error")
	}
	again, err := NewMetricsOn(prometheus.WrapRegistererWith(prometheus.Labels{"guard": "redlock"}, reg))
	if err != nil {
		t.Fatalf("NewMetricsOn again for redlock: %v", err)
	}
	if again.ops != ms[0].ops {
		t.Error("NewMetricsOn again for redlock: got new collectors, want the first one's")
	}
	if ms[0].Registry() != nil {
		t.Error("Registry of NewMetricsOn: want nil")
	}
	if _, _, err := ms[0].Serve(context.Background(), "127.0.0.1:0"); err == nil {
		t.Error("Serve of NewMetricsOn: got no error, want a pointer to ServeMetrics")
	}
	h := NewHistSet(1)
	h.Outcomes[Reserved] = 3
	if err := ms[1].Interval(&Interval{Hists: h, DoubleGrants: 1}); err != nil {
		t.Fatal(err)
	}
	addr, stop, err := ServeMetrics(context.Background(), "127.0.0.1:0", reg)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`redlab_load_operations_total{guard="redlock-fenced",outcome="reserved"} 3`,
		`redlab_load_operations_total{guard="redlock",outcome="reserved"} 0`,
		`redlab_load_double_grants_total{guard="redlock-fenced"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%.2000s", want, body)
		}
	}
}

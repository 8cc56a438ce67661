package loadgen

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetrics(t *testing.T) {
	m := NewMetrics()
	h := NewHistSet(2)
	h.Outcomes[Reserved], h.Outcomes[Late], h.LateStarts = 7, 2, 1
	h.recordLatency(h.Acquire, 3*time.Millisecond)
	h.recordLatency(h.E2E, 5*time.Millisecond)
	h.NodeOutcomes[1][NodeTimeout] = 4
	iv := &Interval{Hists: h, InFlight: 3, TargetRate: 100, DoubleGrants: 2}
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
		{"node timeouts (Nodes[1] is node 2)", testutil.ToFloat64(m.nodeSets.WithLabelValues("2", "timeout")), 8},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if v := testutil.ToFloat64(m.latency.WithLabelValues("acquire", "99")); v < 0.0029 || v > 0.0031 {
		t.Errorf("acquire p99 gauge = %v, want 0.003", v)
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

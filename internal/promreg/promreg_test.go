package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "X."}, []string{"k"})
}

func TestRegisterReusesTheSameCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := newCounter(), newCounter()
	if err := Register(reg, &a); err != nil {
		t.Fatal(err)
	}
	if err := Register(reg, &b); err != nil {
		t.Fatalf("second Register of the same collector: %v", err)
	}
	if a != b {
		t.Fatalf("second Register: got a new collector, want the first one")
	}
	b.WithLabelValues("v").Inc()
	if got := testutil.ToFloat64(a.WithLabelValues("v")); got != 1 {
		t.Errorf("x_total through the first: got %v, want 1", got)
	}

	// With an interface type the dynamic types must match.
	var g1, g2 prometheus.Gauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "y", Help: "Y."}), prometheus.NewGauge(prometheus.GaugeOpts{Name: "y", Help: "Y."})
	if err := Register(reg, &g1); err != nil {
		t.Fatal(err)
	}
	if err := Register(reg, &g2); err != nil || g2 != g1 {
		t.Errorf("second gauge y: got %p, %v; want the first gauge %p", g2, err, g1)
	}
}

func TestRegisterRefusesAConflict(t *testing.T) {
	for name, second := range map[string]prometheus.Collector{
		"other labels": prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "X."}, []string{"other"}),
		"other help":   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "Not X."}, []string{"k"}),
		"other type":   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "x_total", Help: "X."}, []string{"k"}),
	} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			first := newCounter()
			if err := Register(reg, &first); err != nil {
				t.Fatal(err)
			}
			c := second
			if err := Register(reg, &c); err == nil {
				t.Fatalf("Register of a conflicting x_total: got nil error, want one")
			}
			if c != second {
				t.Errorf("after a refused Register: the collector was replaced")
			}
		})
	}
}

package loadgen

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the generator's own Prometheus metrics, on a registry of their
// own (so a process embedding the generator never mixes them with its
// service metrics). They are updated by the collector once per interval,
// never on the hot path. Labels are bounded: outcome, node number (from 1),
// histogram, percentile.
type Metrics struct {
	reg          *prometheus.Registry
	ops          *prometheus.CounterVec
	lateStarts   prometheus.Counter
	inFlight     prometheus.Gauge
	targetRate   prometheus.Gauge
	latency      *prometheus.GaugeVec
	doubleGrants prometheus.Counter
	nodeSets     *prometheus.CounterVec
	prevDG       int64
}

var metricQuantiles = []struct {
	label string
	q     float64
}{{"50", 50}, {"90", 90}, {"99", 99}, {"99.9", 99.9}}

var metricPercentiles = func() []float64 {
	qs := make([]float64, len(metricQuantiles))
	for i, q := range metricQuantiles {
		qs[i] = q.q
	}
	return qs
}()

// NewMetrics registers the generator's metrics on a fresh registry, with the
// Go and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlab_load_operations_total",
			Help: "Scheduled operations by outcome; late means never sent (no in-flight slot within the lateness tolerance).",
		}, []string{"outcome"}),
		lateStarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlab_load_late_starts_total",
			Help: "Operations sent later than the lateness tolerance after their intended start.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "redlab_load_in_flight",
			Help: "Operations sent and not yet ended, at the end of the last interval.",
		}),
		targetRate: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "redlab_load_target_rate_per_second",
			Help: "Operations per second the schedule asks of this generator.",
		}),
		latency: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "redlab_load_latency_seconds",
			Help: "Latency percentiles over the last interval, from the generator's HdrHistograms (e2e is measured from the intended start).",
		}, []string{"histogram", "percentile"}),
		doubleGrants: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlab_load_double_grants_total",
			Help: "Holds that overlapped another holder's hold on the same key.",
		}),
		nodeSets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlab_load_node_sets_total",
			Help: "Lock SET requests by node number (from 1) and outcome (granted, taken, error, timeout, abandoned).",
		}, []string{"node", "outcome"}),
	}
	m.reg.MustRegister(m.ops, m.lateStarts, m.inFlight, m.targetRate, m.latency, m.doubleGrants, m.nodeSets,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, name := range outcomeNames {
		m.ops.WithLabelValues(name)
	}
	return m
}

// Registry is the registry the metrics live on.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Interval is an IntervalSink.
func (m *Metrics) Interval(iv *Interval) error {
	h := iv.Hists
	for i, c := range h.Outcomes {
		if c > 0 {
			m.ops.WithLabelValues(outcomeNames[i]).Add(float64(c))
		}
	}
	m.lateStarts.Add(float64(h.LateStarts))
	m.inFlight.Set(float64(iv.InFlight))
	m.targetRate.Set(iv.TargetRate)
	if d := iv.DoubleGrants - m.prevDG; d > 0 {
		m.doubleGrants.Add(float64(d))
	}
	m.prevDG = iv.DoubleGrants
	for _, t := range h.Tagged() {
		if t.Tag == TagAttempts || t.Hist.TotalCount() == 0 {
			continue
		}
		vals := atPercentiles(t.Hist, metricPercentiles...)
		for i, q := range metricQuantiles {
			m.latency.WithLabelValues(t.Tag, q.label).Set(float64(vals[i]) / 1e9)
		}
	}
	for i, no := range h.NodeOutcomes {
		for j, c := range no {
			if c > 0 {
				m.nodeSets.WithLabelValues(strconv.Itoa(nodeNumber(i)), nodeOutcomeNames[j]).Add(float64(c))
			}
		}
	}
	return nil
}

// Serve exposes /metrics on addr until ctx ends or the returned stop is
// called; stop waits for the server to shut down and may be called twice.
func (m *Metrics) Serve(ctx context.Context, addr string) (bound string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("loadgen: metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	stopCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		// Serve returns ErrServerClosed after Shutdown; any other error means
		// the listener died, and the run goes on without metrics.
		_ = srv.Serve(ln)
	}()
	go func() {
		defer wg.Done()
		<-stopCtx.Done()
		shut, c := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer c()
		_ = srv.Shutdown(shut)
	}()
	return ln.Addr().String(), func() { cancel(); wg.Wait() }, nil
}

package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redlocklab/redlocklab/internal/promreg"
)

// Metrics are the generator's own Prometheus metrics. NewMetrics puts them
// on a registry of their own (so a process embedding the generator never
// mixes them with its service metrics); NewMetricsOn adds them to one the
// caller owns. They are updated by the collector once per interval, never on
// the hot path: the HdrHistograms stay the source of truth for the reports,
// and each interval's samples are replayed into real Prometheus histograms
// (native, with classic buckets kept). Labels are bounded: outcome, node
// number (from 1), histogram tag.
type Metrics struct {
	reg            *prometheus.Registry // nil with NewMetricsOn
	ops            *prometheus.CounterVec
	lateStarts     prometheus.Counter
	inFlight       prometheus.Gauge
	targetRate     prometheus.Gauge
	latency        *prometheus.HistogramVec
	doubleGrants   prometheus.Counter
	lockViolations prometheus.Counter
	nodeSets       *prometheus.CounterVec
	prevDG, prevLV int64
}

// latencyBuckets are the classic buckets of redlab_load_latency_seconds:
// from a LAN round trip to an end-to-end latency that waited out an
// acquire timeout.
var latencyBuckets = []float64{.00025, .0005, .001, .002, .003, .005, .0075, .01, .015, .02, .03, .05,
	.075, .1, .15, .25, .5, 1, 2.5, 5, 10, 30, 60}

// NewMetrics registers the generator's metrics on a fresh registry, with the
// Go and process collectors.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := NewMetricsOn(reg)
	if err != nil {
		panic(err) // a fresh registry holds nothing that could clash
	}
	m.reg = reg
	return m
}

// NewMetricsOn registers the generator's metrics on reg (a drill runs one
// generator per guard in one process: wrap reg with a guard label for
// each). A second NewMetricsOn on the same registry reuses the first one's
// collectors (their counts add up); other collectors under these names are
// an error. Registry returns nil for these Metrics; serve reg's gatherer
// with ServeMetrics.
func NewMetricsOn(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
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
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:                            "redlab_load_latency_seconds",
			Help:                            "Latency by histogram tag (e2e from the intended start, e2e_uncorrected from the send, acquire, hold, release, nodeN for node N's SET), replayed from the generator's HdrHistograms once per interval.",
			Buckets:                         latencyBuckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour,
		}, []string{"histogram"}),
		doubleGrants: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlab_load_double_grants_total",
			Help: "Holds that overlapped another holder's hold on the same key, as the checker finds them (a few seconds after the release).",
		}),
		lockViolations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlab_load_lock_violations_total",
			Help: "Double grants whose overlap fell while both holders were inside their validity: a failure of the lock itself, as the checker finds them.",
		}),
		nodeSets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlab_load_node_sets_total",
			Help: "Lock SET requests by node number (from 1) and outcome (granted, taken, error, timeout, abandoned).",
		}, []string{"node", "outcome"}),
	}
	if err := errors.Join(
		promreg.Register(reg, &m.ops),
		promreg.Register(reg, &m.lateStarts),
		promreg.Register(reg, &m.inFlight),
		promreg.Register(reg, &m.targetRate),
		promreg.Register(reg, &m.latency),
		promreg.Register(reg, &m.doubleGrants),
		promreg.Register(reg, &m.lockViolations),
		promreg.Register(reg, &m.nodeSets),
	); err != nil {
		return nil, fmt.Errorf("loadgen: metrics: %w", err)
	}
	for _, name := range outcomeNames {
		m.ops.WithLabelValues(name)
	}
	return m, nil
}

// Registry is the registry NewMetrics made (nil for NewMetricsOn).
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
	if d := iv.LockViolations - m.prevLV; d > 0 {
		m.lockViolations.Add(float64(d))
	}
	m.prevLV = iv.LockViolations
	for _, t := range h.Tagged() {
		if t.Tag == TagAttempts || t.Hist.TotalCount() == 0 {
			continue
		}
		replay(m.latency.WithLabelValues(t.Tag), t.Hist)
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

// replay observes every sample of an interval's HdrHistogram (values in
// ns) into o, each at the middle of its HDR bucket (within 0.1% of the
// value recorded): the cost is one Observe per operation, once per
// interval, off the hot path.
func replay(o prometheus.Observer, h *hdr.Histogram) {
	for _, b := range h.Distribution() {
		if b.Count == 0 {
			continue
		}
		v := float64(b.From+b.To) / 2 / 1e9
		for i := int64(0); i < b.Count; i++ {
			o.Observe(v)
		}
	}
}

// Serve exposes /metrics on addr until ctx ends or the returned stop is
// called; stop waits for the server to shut down and may be called twice.
// It needs the registry of NewMetrics.
func (m *Metrics) Serve(ctx context.Context, addr string) (bound string, stop func(), err error) {
	if m.reg == nil {
		return "", nil, errors.New("loadgen: metrics on a caller's registry: serve it with ServeMetrics")
	}
	return ServeMetrics(ctx, addr, m.reg)
}

// ServeMetrics exposes g on addr's /metrics until ctx ends or the returned
// stop is called; stop waits for the server to shut down and may be called
// twice.
func ServeMetrics(ctx context.Context, addr string, g prometheus.Gatherer) (bound string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("loadgen: metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
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

// Package redlockprom turns a redlock Client's observer events into
// Prometheus metrics. It is a module of its own,
// github.com/redlocklab/redlocklab/redlock/redlockprom, apart from the lock
// library's: the library requires go-redis alone, and a service that does
// not use Prometheus never has it in its module graph.
//
//	m, err := redlockprom.New(reg) // reg: a prometheus.Registerer passed down from main
//	locker, err := redlock.New(nodes, redlock.WithObserver(m.Observer()))
//
// One Metrics serves any number of Clients (give each its own Observer):
// the counters and histograms add up over them, and the circuit breaker
// gauge counts how many Clients are in each state. Registering a second
// Metrics on the same registry reuses the first one's collectors, so
// several replicas in one process may each call New.
//
// Labels are bounded: node is the node's 1-based position in the Client
// (as every redlab command numbers nodes), op is acquire, release or
// extend, outcome a node's part in an attempt (granted, taken, error,
// timeout, abandoned), result the verdict of a call. Keys, tokens and error
// texts never become labels. To tell the lock clients of several services
// in one process apart, wrap the registerer
// (prometheus.WrapRegistererWith(prometheus.Labels{"guard": g}, reg)).
//
// Every histogram is a native histogram (for servers that ingest them) that
// also keeps classic buckets, for histogram_quantile on servers that do
// not.
package redlockprom

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlocklab/redlocklab/redlock"
)

// Namespace prefixes every metric of this package.
const Namespace = "redlock"

// Results, the values of the "result" label.
const (
	ResultGranted           = "granted"
	ResultContended         = "contended"
	ResultUnavailable       = "unavailable"
	ResultCircuitOpen       = "circuit_open"
	ResultOverloaded        = "overloaded"
	ResultValidityExhausted = "validity_exhausted"
	ResultNotHeld           = "not_held"
	ResultExpired           = "expired"
	ResultCanceled          = "canceled"
	ResultClosed            = "closed"
	ResultError             = "error"
	// ResultReleased and ResultExtended are the successes of release and
	// extend.
	ResultReleased = "released"
	ResultExtended = "extended"
)

// Probe results of the half-open circuit breaker.
const (
	ProbeClosed    = "closed"    // a quorum answered: the breaker closed
	ProbeReopened  = "reopened"  // no quorum: the breaker opened again
	ProbeUndecided = "undecided" // the caller's context ended first
)

var (
	acquireResults = []string{ResultGranted, ResultContended, ResultUnavailable, ResultCircuitOpen,
		ResultValidityExhausted, ResultCanceled, ResultClosed, ResultError}
	releaseResults = []string{ResultReleased, ResultNotHeld, ResultExpired, ResultUnavailable, ResultCanceled, ResultError}
	extendResults  = []string{ResultExtended, ResultNotHeld, ResultExpired, ResultValidityExhausted,
		ResultUnavailable, ResultCanceled, ResultError}
	probeResults  = []string{ProbeClosed, ProbeReopened, ProbeUndecided}
	breakerStates = []redlock.BreakerState{redlock.BreakerClosed, redlock.BreakerOpen, redlock.BreakerHalfOpen}
)

// Classic buckets, kept next to the native ones.
var (
	// latencyBuckets cover a round trip on a LAN (sub-millisecond) up to an
	// acquire that retried for seconds.
	latencyBuckets = []float64{.00025, .0005, .001, .002, .003, .005, .0075, .01, .015, .02, .03, .05,
		.075, .1, .15, .25, .5, 1, 2.5, 5, 10, 30}
	attemptBuckets  = []float64{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64}
	validityBuckets = prometheus.ExponentialBucketsRange(0.01, 600, 16)
	// ratioBuckets are fine near 1: with the default drift a healthy grant
	// keeps about 99% of its TTL, and what matters is how much less.
	ratioBuckets  = []float64{.1, .25, .5, .75, .9, .95, .97, .98, .985, .99, .995, 1}
	marginBuckets = []float64{-4, -3, -2, -1, 0, 1, 2, 3, 4}
)

// Native histogram settings: buckets about 10% wide, at most 160 of them
// (the resolution drops before that), reset at most hourly.
const (
	nativeFactor     = 1.1
	nativeMaxBuckets = 160
	nativeMinReset   = time.Hour
)

// Metrics are the collectors of one registry. Use Observer to get the
// redlock.Observer of each Client.
type Metrics struct {
	acquireDuration *prometheus.HistogramVec
	acquireAttempts prometheus.Histogram
	attempts        *prometheus.CounterVec
	nodeDuration    *prometheus.HistogramVec
	validity        *prometheus.HistogramVec
	validityRatio   *prometheus.HistogramVec
	quorumMargin    prometheus.Histogram
	releases        *prometheus.CounterVec
	extensions      *prometheus.CounterVec
	restored        prometheus.Counter
	breakerState    *prometheus.GaugeVec
	breakerRejected prometheus.Counter
	breakerProbes   *prometheus.CounterVec
	nodes           prometheus.Gauge
	quorum          prometheus.Gauge
	stateGauges     [4]prometheus.Gauge // by BreakerState
}

func histogramOpts(name, help string, buckets []float64) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{
		Namespace: Namespace, Name: name, Help: help, Buckets: buckets,
		NativeHistogramBucketFactor:     nativeFactor,
		NativeHistogramMaxBucketNumber:  nativeMaxBuckets,
		NativeHistogramMinResetDuration: nativeMinReset,
	}
}

// New registers the metrics on reg, or reuses those a previous New
// registered there. It fails when reg holds other collectors under these
// names.
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("redlockprom: nil registerer")
	}
	m := &Metrics{
		acquireDuration: prometheus.NewHistogramVec(histogramOpts("acquire_duration_seconds",
			"Wall time of Acquire and TryAcquire calls, retries and backoffs included, by result.", latencyBuckets),
			[]string{"result"}),
		acquireAttempts: prometheus.NewHistogram(histogramOpts("acquire_attempts",
			"Attempts sent to the nodes per Acquire or TryAcquire call (0 when none was).", attemptBuckets)),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "attempts_total",
			Help: "Acquire attempts by result, retries included; circuit_open counts attempts the breaker refused and overloaded those the adaptive limit turned away, neither sent.",
		}, []string{"result"}),
		nodeDuration: prometheus.NewHistogramVec(histogramOpts("node_request_duration_seconds",
			"Time from an attempt's start to one node's answer (to when it was given up on, for timeout and abandoned), by node number from 1, operation and outcome.", latencyBuckets),
			[]string{"node", "op", "outcome"}),
		validity: prometheus.NewHistogramVec(histogramOpts("validity_remaining_seconds",
			"Validity left at the decision of a granted acquire or a successful extend, by operation.", validityBuckets),
			[]string{"op"}),
		validityRatio: prometheus.NewHistogramVec(histogramOpts("validity_remaining_ratio",
			"Validity left at the decision of a granted acquire or a successful extend, as a share of its TTL, by operation.", ratioBuckets),
			[]string{"op"}),
		quorumMargin: prometheus.NewHistogram(histogramOpts("quorum_margin",
			"Granted votes minus the quorum at the decision of each acquire attempt sent to the nodes; the client decides as soon as a quorum granted, so a granted attempt shows 0 unless answers arrived together.", marginBuckets)),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "releases_total",
			Help: "Release calls by result; not_held means our token was gone from too many nodes (the lock was lost before the release).",
		}, []string{"result"}),
		extensions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "extensions_total",
			Help: "Extend calls by result.",
		}, []string{"result"}),
		restored: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "extend_restored_keys_total",
			Help: "Nodes on which an extend found the key missing (a node restarted without it) and set it again.",
		}),
		breakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "circuit_breaker_state",
			Help: "Lock clients whose circuit breaker was last seen in this state (closed, open, half_open).",
		}, []string{"state"}),
		breakerRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "circuit_breaker_rejected_total",
			Help: "Acquire attempts the open circuit breaker refused without sending anything.",
		}),
		breakerProbes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "circuit_breaker_probes_total",
			Help: "Probe attempts of the half-open circuit breaker, by what they did to it (closed, reopened, undecided).",
		}, []string{"result"}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "nodes",
			Help: "Lock nodes of the clients (from their latest attempt).",
		}),
		quorum: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "quorum",
			Help: "Votes an attempt needs: nodes/2+1 (from the clients' latest attempt).",
		}),
	}
	if err := errors.Join(
		register(reg, &m.acquireDuration),
		register(reg, &m.acquireAttempts),
		register(reg, &m.attempts),
		register(reg, &m.nodeDuration),
		register(reg, &m.validity),
		register(reg, &m.validityRatio),
		register(reg, &m.quorumMargin),
		register(reg, &m.releases),
		register(reg, &m.extensions),
		register(reg, &m.restored),
		register(reg, &m.breakerState),
		register(reg, &m.breakerRejected),
		register(reg, &m.breakerProbes),
		register(reg, &m.nodes),
		register(reg, &m.quorum),
	); err != nil {
		return nil, fmt.Errorf("redlockprom: register: %w", err)
	}
	// Every result exists from the start at 0, so that rate() and the
	// dashboards see a series before the first failure.
	for _, r := range acquireResults {
		m.attempts.WithLabelValues(r)
	}
	for _, r := range releaseResults {
		m.releases.WithLabelValues(r)
	}
	for _, r := range extendResults {
		m.extensions.WithLabelValues(r)
	}
	for _, r := range probeResults {
		m.breakerProbes.WithLabelValues(r)
	}
	for _, s := range breakerStates {
		m.stateGauges[s] = m.breakerState.WithLabelValues(stateLabel(s))
	}
	return m, nil
}

// stateLabel is a breaker state as a label value.
func stateLabel(s redlock.BreakerState) string {
	if s == redlock.BreakerHalfOpen {
		return "half_open"
	}
	return s.String()
}

// Observer returns the Observer for one Client: pass it to
// redlock.WithObserver. It is also a redlock.AcquireObserver.
func (m *Metrics) Observer() *Observer { return &Observer{m: m} }

// Observer records one Client's events on its Metrics. It tracks that
// Client's circuit breaker state, so each Client needs its own.
type Observer struct {
	m *Metrics

	mu    sync.Mutex
	state redlock.BreakerState // last seen; 0 before the first acquire event
}

var _ redlock.AcquireObserver = (*Observer)(nil)

// Observe records one attempt, release or extend.
func (o *Observer) Observe(e redlock.Event) {
	m := o.m
	op := e.Op.String()
	for _, n := range e.Nodes {
		m.nodeDuration.WithLabelValues(strconv.Itoa(n.Node+1), op, n.Outcome.String()).Observe(n.Latency.Seconds())
	}
	if len(e.Nodes) > 0 {
		m.nodes.Set(float64(len(e.Nodes)))
		m.quorum.Set(float64(e.Quorum))
	}
	switch e.Op {
	case redlock.OpAcquire:
		o.acquireAttempt(e)
	case redlock.OpRelease:
		r := result(e.Err)
		if r == ResultGranted {
			r = ResultReleased
		}
		m.releases.WithLabelValues(r).Inc()
	case redlock.OpExtend:
		r := result(e.Err)
		if r == ResultGranted {
			r = ResultExtended
			o.validity(e)
		}
		m.extensions.WithLabelValues(r).Inc()
		if e.Restored > 0 {
			m.restored.Add(float64(e.Restored))
		}
	}
}

func (o *Observer) acquireAttempt(e redlock.Event) {
	m := o.m
	m.attempts.WithLabelValues(result(e.Err)).Inc()
	switch {
	case e.Rejected:
		m.breakerRejected.Inc()
	case e.Overloaded:
		// Turned away unsent: no votes to measure a margin by.
	default:
		m.quorumMargin.Observe(float64(e.Votes - e.Quorum))
		if e.Err == nil {
			o.validity(e)
		}
	}
	if e.Probe {
		p := ProbeUndecided
		switch {
		case e.Breaker == redlock.BreakerClosed:
			p = ProbeClosed
		case e.Breaker == redlock.BreakerOpen:
			p = ProbeReopened
		}
		m.breakerProbes.WithLabelValues(p).Inc()
	}
	if e.Breaker == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if e.Breaker == o.state || int(e.Breaker) >= len(m.stateGauges) {
		return
	}
	if o.state != 0 {
		m.stateGauges[o.state].Dec()
	}
	m.stateGauges[e.Breaker].Inc()
	o.state = e.Breaker
}

func (o *Observer) validity(e redlock.Event) {
	op := e.Op.String()
	o.m.validity.WithLabelValues(op).Observe(e.Validity.Seconds())
	if e.TTL > 0 {
		o.m.validityRatio.WithLabelValues(op).Observe(float64(e.Validity) / float64(e.TTL))
	}
}

// ObserveAcquire records one whole Acquire or TryAcquire call.
func (o *Observer) ObserveAcquire(r redlock.AcquireResult) {
	o.m.acquireDuration.WithLabelValues(result(r.Err)).Observe(r.Elapsed.Seconds())
	o.m.acquireAttempts.Observe(float64(r.Attempts))
}

// result names an operation's verdict. The lock's own reasons come before
// the context's: an Acquire that ran out of time while the key was held
// elsewhere was contended.
func result(err error) string {
	switch {
	case err == nil:
		return ResultGranted
	case errors.Is(err, redlock.ErrCircuitOpen):
		return ResultCircuitOpen
	case errors.Is(err, redlock.ErrOverloaded):
		return ResultOverloaded
	case errors.Is(err, redlock.ErrContended):
		return ResultContended
	case errors.Is(err, redlock.ErrValidityExhausted):
		return ResultValidityExhausted
	case errors.Is(err, redlock.ErrNotHeld):
		return ResultNotHeld
	case errors.Is(err, redlock.ErrExpired):
		return ResultExpired
	case errors.Is(err, redlock.ErrUnavailable):
		return ResultUnavailable
	case errors.Is(err, redlock.ErrClosed):
		return ResultClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ResultCanceled
	}
	return ResultError
}

// register registers *c on reg. When reg already holds a collector of the
// same Go type with the same descriptors (another Metrics on the same
// registry), *c becomes that collector, so that both update the same
// series. Any other failure is returned, *c left as it was. The lab's
// services do the same with their own collectors; this module cannot share
// their helper, as it imports nothing of the lab's.
func register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	var are prometheus.AlreadyRegisteredError
	if err != nil && errors.As(err, &are) && reflect.TypeOf(are.ExistingCollector) == reflect.TypeOf(*c) {
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
			return nil
		}
	}
	return err
}

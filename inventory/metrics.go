package inventory

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlocklab/redlocklab/internal/promreg"
)

const metricsNamespace = "redlab_inventory"

// Reservation outcomes, the bounded values of the "outcome" label.
const (
	outcomeReserved    = "reserved"
	outcomeReplayed    = "replayed"
	outcomeOutOfStock  = "out_of_stock"
	outcomeContended   = "contended"
	outcomeUnavailable = "unavailable"
	outcomeOverloaded  = "overloaded"
	outcomeFenced      = "fenced"
	// outcomeVersionConflict: an optimistic guard ran out of tries
	// (ErrConflict).
	outcomeVersionConflict = "version_conflict"
	outcomeInvalid         = "invalid"
	outcomeNotFound        = "not_found"
	outcomeRequestIDReused = "request_id_reused"
	outcomeCanceled        = "canceled"
	// outcomeRequestTimeout: the body did not arrive within the server's
	// read timeout (a slow client, not a malformed request).
	outcomeRequestTimeout = "request_timeout"
	outcomeError          = "error"
)

// outcomes lists every outcome, for the series that exist from the start.
var outcomes = []string{outcomeReserved, outcomeReplayed, outcomeOutOfStock, outcomeContended, outcomeUnavailable,
	outcomeOverloaded, outcomeFenced, outcomeVersionConflict, outcomeInvalid, outcomeNotFound, outcomeRequestIDReused,
	outcomeCanceled, outcomeRequestTimeout, outcomeError}

// Store operations, the bounded values of the store metric's "op" label.
const (
	storeLookup    = "lookup"     // the request ID's earlier reservation, if any
	storeRead      = "read"       // the stock read of the read-modify-write
	storeWrite     = "write"      // the write and its ledger entry, one transaction
	storeFence     = "fence"      // redlock-fenced: fence the row before the read
	storeNextFence = "next_fence" // redlock-fenced: draw the fencing token
	storeLockRow   = "lock_row"   // db-for-update: begin, lock the row and read it
)

// metrics are the service's and the handler's Prometheus collectors. Labels
// are bounded: the guard (one per row of the guard table), the outcome (above), the store
// operation (above), the route pattern and the status code, never a SKU or
// a request ID.
type metrics struct {
	reservations     *prometheus.CounterVec
	duration         *prometheus.HistogramVec
	acquire          *prometheus.HistogramVec
	fencedRejections prometheus.Counter
	requests         *prometheus.CounterVec
	inFlight         *prometheus.GaugeVec
	store            *prometheus.HistogramVec
	lockTTL          *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "reservations_total",
			Help: "Reservation attempts by guard and outcome.",
		}, []string{"guard", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "reservation_duration_seconds",
			Help:    "Wall time of a reservation (lock acquire, critical section and release), by guard.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"guard"}),
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "lock_acquire_seconds",
			Help:    "Wall time to acquire the lock, retries included (lock guards only), by guard.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"guard"}),
		fencedRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "fenced_rejections_total",
			Help: "Stale lock holders whose write the store rejected because a newer fencing token had fenced the row.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "reservations_in_flight",
			Help: "Reservations started and not yet answered, by guard.",
		}, []string{"guard"}),
		store: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "store_duration_seconds",
			Help:    "Wall time of the store operations a reservation makes (lookup, read, write, fence, next_fence, lock_row), by operation.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"op"}),
		lockTTL: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "lock_ttl_seconds",
			Help: "The lock TTL of the guards that lock: a crashed lock node must stay down at least this long before it rejoins.",
		}, []string{"guard"}),
	}
	if reg == nil {
		return m, nil
	}
	if err := errors.Join(
		promreg.Register(reg, &m.reservations),
		promreg.Register(reg, &m.duration),
		promreg.Register(reg, &m.acquire),
		promreg.Register(reg, &m.fencedRejections),
		promreg.Register(reg, &m.requests),
		promreg.Register(reg, &m.inFlight),
		promreg.Register(reg, &m.store),
		promreg.Register(reg, &m.lockTTL),
	); err != nil {
		return nil, fmt.Errorf("inventory: register metrics: %w", err)
	}
	return m, nil
}

// outcome maps a Reserve result to its label value.
func outcome(r Reservation, err error) string {
	switch {
	case err == nil && r.Replayed:
		return outcomeReplayed
	case err == nil:
		return outcomeReserved
	case errors.Is(err, ErrOutOfStock):
		return outcomeOutOfStock
	case errors.Is(err, ErrContended):
		return outcomeContended
	case errors.Is(err, ErrUnavailable):
		return outcomeUnavailable
	case errors.Is(err, ErrOverloaded):
		return outcomeOverloaded
	case errors.Is(err, ErrFenced):
		return outcomeFenced
	case errors.Is(err, ErrConflict):
		return outcomeVersionConflict
	case errors.Is(err, ErrInvalid):
		return outcomeInvalid
	case errors.Is(err, ErrNotFound):
		return outcomeNotFound
	case errors.Is(err, ErrRequestIDReused):
		return outcomeRequestIDReused
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcomeCanceled
	default:
		return outcomeError
	}
}

// observe records one reservation.
func (m *metrics) observe(g Guard, r Reservation, err error, t Timing, seconds float64) {
	o := outcome(r, err)
	m.reservations.WithLabelValues(string(g), o).Inc()
	m.duration.WithLabelValues(string(g)).Observe(seconds)
	if t.Attempts > 0 {
		m.acquire.WithLabelValues(string(g)).Observe(t.Acquire.Seconds())
	}
	if o == outcomeFenced {
		m.fencedRejections.Inc()
	}
}

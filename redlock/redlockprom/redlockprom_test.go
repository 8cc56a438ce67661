package redlockprom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlockprom"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

const nodeTimeout = 500 * time.Millisecond

func newClient(t *testing.T, addrs []string, m *redlockprom.Metrics, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	return redlocktest.NewClient(t, addrs, nodeTimeout, append(opts, redlock.WithObserver(m.Observer()))...)
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// family gathers reg and returns the named family (nil when absent).
func family(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

// labelled returns the metrics of the family whose labels include want.
func labelled(mf *dto.MetricFamily, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range mf.GetMetric() {
		ok := 0
		for _, lp := range m.GetLabel() {
			if v, in := want[lp.GetName()]; in && v == lp.GetValue() {
				ok++
			}
		}
		if ok == len(want) {
			out = append(out, m)
		}
	}
	return out
}

func counterOf(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mf := family(t, reg, name)
	if mf == nil {
		t.Fatalf("no metric %s", name)
	}
	sum := 0.0
	for _, m := range labelled(mf, labels) {
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

func TestMetricsOfARealClient(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	reg := prometheus.NewPedanticRegistry()
	m, err := redlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, cl.Addrs(), m, redlock.WithMaxAttempts(2),
		redlock.WithBackoff(redlock.RandomBackoff(time.Millisecond, 2*time.Millisecond)))
	const ttl = 10 * time.Second

	l, err := c.Acquire(ctx, "lock:k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "lock:k", ttl); !errors.Is(err, redlock.ErrContended) {
		t.Fatalf("second acquire: got %v, want ErrContended", err)
	}
	if err := l.Extend(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	// The lock is lost behind the holder's back: release finds it gone.
	for _, n := range cl.Nodes {
		if err := n.Client().Del(ctx, "lock:k").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("release of a deleted lock: got %v, want ErrNotHeld", err)
	}
	short, err := c.Acquire(ctx, "lock:short", 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for short.Validity() > 0 {
		time.Sleep(time.Until(short.Deadline()) + time.Millisecond)
	}
	if err := short.Extend(ctx, ttl); !errors.Is(err, redlock.ErrExpired) {
		t.Fatalf("extend after expiry: got %v, want ErrExpired", err)
	}

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"redlock_attempts_total", map[string]string{"result": "granted"}, 2},
		{"redlock_attempts_total", map[string]string{"result": "contended"}, 2},
		{"redlock_attempts_total", map[string]string{"result": "unavailable"}, 0},
		{"redlock_acquire_duration_seconds", map[string]string{"result": "granted"}, 2},
		{"redlock_acquire_duration_seconds", map[string]string{"result": "contended"}, 1},
		{"redlock_acquire_attempts", nil, 3},
		{"redlock_extensions_total", map[string]string{"result": "extended"}, 1},
		{"redlock_extensions_total", map[string]string{"result": "expired"}, 1},
		{"redlock_releases_total", map[string]string{"result": "not_held"}, 1},
		{"redlock_releases_total", map[string]string{"result": "released"}, 0},
		{"redlock_validity_remaining_seconds", map[string]string{"op": "acquire"}, 2},
		{"redlock_validity_remaining_ratio", map[string]string{"op": "acquire"}, 2},
		{"redlock_validity_remaining_ratio", map[string]string{"op": "extend"}, 1},
		{"redlock_quorum_margin", nil, 4},
		// Every node answers every attempt sent, one way or another: 4
		// acquire attempts, one extend, one release per node.
		{"redlock_node_request_duration_seconds", map[string]string{"node": "1", "op": "acquire"}, 4},
		{"redlock_node_request_duration_seconds", map[string]string{"node": "3", "op": "acquire"}, 4},
		{"redlock_node_request_duration_seconds", map[string]string{"node": "2", "op": "extend"}, 1},
		{"redlock_node_request_duration_seconds", map[string]string{"node": "2", "op": "release"}, 1},
		{"redlock_nodes", nil, 3},
		{"redlock_quorum", nil, 2},
	} {
		if got := counterOf(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v: got %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}

	// The release decided on the first two nodes that found the token
	// gone (the third may have been abandoned).
	if got := counterOf(t, reg, "redlock_node_request_duration_seconds", map[string]string{"op": "release", "outcome": "taken"}); got < 2 {
		t.Errorf("release answers 'taken' over the nodes: got %v, want at least 2", got)
	}
	// The attempts histogram's sum: 1 for the grant, 2 for the contended
	// call, 1 for the short lock.
	if got := family(t, reg, "redlock_acquire_attempts").GetMetric()[0].GetHistogram().GetSampleSum(); got != 4 {
		t.Errorf("redlock_acquire_attempts sum: got %v, want 4", got)
	}
	// A granted acquire keeps about 99% of its TTL (1% drift), less the
	// round trip: every ratio observed is in (0.5, 1].
	ratio := labelled(family(t, reg, "redlock_validity_remaining_ratio"), map[string]string{"op": "acquire"})[0].GetHistogram()
	if mean := ratio.GetSampleSum() / float64(ratio.GetSampleCount()); !(mean > 0.5 && mean <= 1) {
		t.Errorf("validity ratio at grant: got mean %v, want (0.5, 1]", mean)
	}
	for _, node := range []string{"1", "2", "3"} {
		for _, mt := range labelled(family(t, reg, "redlock_node_request_duration_seconds"), map[string]string{"node": node}) {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == "outcome" && !strings.Contains("granted taken error timeout abandoned", lp.GetValue()) {
					t.Errorf("node %s: outcome %q is not one of the five", node, lp.GetValue())
				}
			}
		}
	}
	lint(t, reg)
}

// lint fails on any problem promlint finds in reg's metrics.
func lint(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestCircuitBreakerMetrics(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	reg := prometheus.NewPedanticRegistry()
	m, err := redlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	const cooldown = 100 * time.Millisecond
	c := newClient(t, cl.Addrs(), m, redlock.WithBreakerPolicy(2, cooldown))
	state := func(s string) float64 {
		return counterOf(t, reg, "redlock_circuit_breaker_state", map[string]string{"state": s})
	}
	if _, err := c.TryAcquire(ctx, "lock:b", time.Second); err != nil {
		t.Fatal(err)
	}
	if got := state("closed"); got != 1 {
		t.Fatalf("after a grant: got %v clients closed, want 1", got)
	}

	// Two of three nodes crash: two unavailable attempts open the breaker,
	// the next is refused without being sent. A key per attempt: the
	// survivor may still hold an earlier attempt's key (its cleanup runs in
	// the background), and answering "taken" would decide the round before
	// the second crashed node is counted.
	cl.Nodes[1].Kill()
	cl.Nodes[2].Kill()
	for i := 0; i < 2; i++ {
		if _, err := c.TryAcquire(ctx, fmt.Sprintf("lock:b2-%d", i), time.Second); !errors.Is(err, redlock.ErrUnavailable) {
			t.Fatalf("attempt %d with 2 of 3 nodes down: got %v, want ErrUnavailable", i+1, err)
		}
	}
	if _, err := c.TryAcquire(ctx, "lock:b2", time.Second); !errors.Is(err, redlock.ErrCircuitOpen) {
		t.Fatalf("third attempt: got %v, want ErrCircuitOpen", err)
	}
	if got, want := [3]float64{state("closed"), state("open"), state("half_open")}, [3]float64{0, 1, 0}; got != want {
		t.Errorf("breaker open: got closed/open/half_open %v, want %v", got, want)
	}
	if got := counterOf(t, reg, "redlock_circuit_breaker_rejected_total", nil); got != 1 {
		t.Errorf("rejected: got %v, want 1", got)
	}
	if got := counterOf(t, reg, "redlock_attempts_total", map[string]string{"result": "circuit_open"}); got != 1 {
		t.Errorf("attempts{circuit_open}: got %v, want 1", got)
	}
	if got := counterOf(t, reg, "redlock_node_request_duration_seconds", map[string]string{"node": "2", "outcome": "error"}); got != 2 {
		t.Errorf("node 2 errors: got %v, want 2 (the refused attempt sent nothing)", got)
	}

	// The nodes come back; after the cooldown the probe closes the breaker.
	cl.Nodes[1].Restart()
	cl.Nodes[2].Restart()
	time.Sleep(2 * cooldown)
	if _, err := c.TryAcquire(ctx, "lock:b3", time.Second); err != nil {
		t.Fatalf("probe after the nodes came back: %v", err)
	}
	if got := counterOf(t, reg, "redlock_circuit_breaker_probes_total", map[string]string{"result": "closed"}); got != 1 {
		t.Errorf("probes{closed}: got %v, want 1", got)
	}
	if got, want := [3]float64{state("closed"), state("open"), state("half_open")}, [3]float64{1, 0, 0}; got != want {
		t.Errorf("breaker closed again: got closed/open/half_open %v, want %v", got, want)
	}
	lint(t, reg)
}

func TestSharedRegistry(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	reg := prometheus.NewPedanticRegistry()
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"guard": "redlock"}, reg)
	// Two replicas, each with its own New on the same registerer.
	for i := 0; i < 2; i++ {
		m, err := redlockprom.New(wrapped)
		if err != nil {
			t.Fatalf("New #%d on a shared registry: %v", i+1, err)
		}
		c := newClient(t, cl.Addrs(), m)
		l, err := c.Acquire(ctx, "lock:shared", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := counterOf(t, reg, "redlock_attempts_total", map[string]string{"guard": "redlock", "result": "granted"}); got != 2 {
		t.Errorf("attempts{granted} over two replicas: got %v, want 2", got)
	}
	if got := counterOf(t, reg, "redlock_circuit_breaker_state", map[string]string{"state": "closed"}); got != 2 {
		t.Errorf("clients with a closed breaker: got %v, want 2", got)
	}

	// A registry holding something else under one of the names refuses.
	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "redlock_attempts_total", Help: "not ours"}))
	if _, err := redlockprom.New(other); err == nil {
		t.Error("New on a registry with a conflicting redlock_attempts_total: got no error")
	}
	if _, err := redlockprom.New(nil); err == nil {
		t.Error("New(nil): got no error")
	}
}

// TestHistogramsAreNativeAndClassic checks both representations: native
// buckets for servers that ingest them, classic ones for
// histogram_quantile everywhere else.
func TestHistogramsAreNativeAndClassic(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := redlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	o := m.Observer()
	o.Observe(redlock.Event{Op: redlock.OpAcquire, Attempt: 1, Quorum: 2, Votes: 2, TTL: time.Second, Validity: 980 * time.Millisecond,
		Nodes: []redlock.NodeResult{{Node: 0, Outcome: redlock.Granted, Latency: time.Millisecond}}})
	o.ObserveAcquire(redlock.AcquireResult{Attempts: 1, Elapsed: 2 * time.Millisecond})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	hists := 0
	for _, mf := range mfs {
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, mt := range mf.GetMetric() {
			h := mt.GetHistogram()
			if h.GetSampleCount() == 0 {
				continue
			}
			hists++
			if len(h.GetBucket()) == 0 {
				t.Errorf("%s: no classic buckets", mf.GetName())
			}
			if len(h.GetPositiveSpan()) == 0 && h.GetZeroCount() == 0 && len(h.GetNegativeSpan()) == 0 {
				t.Errorf("%s: no native buckets", mf.GetName())
			}
		}
	}
	if hists < 6 {
		t.Errorf("got %d histograms with samples, want at least 6", hists)
	}
}

func TestOverloadedAttempts(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := redlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	o := m.Observer()
	o.Observe(redlock.Event{Op: redlock.OpAcquire, Attempt: 1, Quorum: 2, Err: redlock.ErrOverloaded, Overloaded: true, Limit: 4})
	o.ObserveAcquire(redlock.AcquireResult{Err: redlock.ErrOverloaded})
	if got := counterOf(t, reg, "redlock_attempts_total", map[string]string{"result": redlockprom.ResultOverloaded}); got != 1 {
		t.Errorf("attempts{overloaded}: got %v, want 1", got)
	}
	if got := counterOf(t, reg, "redlock_acquire_duration_seconds", map[string]string{"result": redlockprom.ResultOverloaded}); got != 1 {
		t.Errorf("acquire_duration{overloaded}: got %v samples, want 1", got)
	}
	if mf := family(t, reg, "redlock_quorum_margin"); mf != nil && counterOf(t, reg, "redlock_quorum_margin", nil) != 0 {
		t.Errorf("quorum_margin: got a sample of an attempt that was never sent")
	}
	lint(t, reg)
}

package inventory

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// sumOf adds up the samples (counter and gauge values, histogram counts) of
// the series of name whose labels include want.
func sumOf(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, want) {
				continue
			}
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
	t.Fatalf("no metric %s", name)
	return 0
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// TestReplicaMetrics: replicas of two Redlock guards share one registry,
// each replica with its own lock client; the service and lock metrics add
// up per guard.
func TestReplicaMetrics(t *testing.T) {
	c := startRedis(t, 3)
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	const ttl = 5 * time.Second
	reservations := map[Guard]int{GuardRedlock: 4, GuardRedlockFenced: 3}
	for _, g := range []Guard{GuardRedlock, GuardRedlock, GuardRedlockFenced} {
		r, err := OpenReplica(ctx, ReplicaConfig{
			StoreDSN: sqliteDSN(t), Guard: g, Nodes: c.Addrs(), NodeTimeout: 500 * time.Millisecond,
			LockTTL: ttl, AcquireTimeout: 5 * time.Second, Registerer: reg,
		})
		if err != nil {
			t.Fatalf("OpenReplica %s: %v", g, err)
		}
		t.Cleanup(func() { r.Close() })
		seed(t, r.Store(), "w", 100)
		for i := 0; i < reservations[g]/2+reservations[g]%2; i++ {
			if _, err := r.Service().Reserve(ctx, Request{SKU: "w", Quantity: 1, RequestID: fmt.Sprintf("%p-%d", r, i)}); err != nil {
				t.Fatalf("%s: Reserve: %v", g, err)
			}
		}
		if g == GuardRedlock {
			// One bad request: counted, and never reaches the store.
			if _, err := r.Service().Reserve(ctx, Request{SKU: "w", Quantity: 0, RequestID: "bad"}); err == nil {
				t.Fatal("Reserve of 0 units: got no error")
			}
		}
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"redlab_inventory_reservations_total", map[string]string{"guard": "redlock", "outcome": "reserved"}, 4},
		{"redlab_inventory_reservations_total", map[string]string{"guard": "redlock", "outcome": "invalid"}, 2},
		{"redlab_inventory_reservations_total", map[string]string{"guard": "redlock-fenced", "outcome": "reserved"}, 2},
		{"redlab_inventory_lock_acquire_seconds", map[string]string{"guard": "redlock-fenced"}, 2},
		{"redlab_inventory_reservations_in_flight", map[string]string{"guard": "redlock"}, 0},
		{"redlab_inventory_lock_ttl_seconds", map[string]string{"guard": "redlock-fenced"}, ttl.Seconds()},
		// Every valid request looks its ID up; each reservation reads and
		// writes once; only the fenced guard draws and sets a fence.
		{"redlab_inventory_store_duration_seconds", map[string]string{"op": "lookup"}, 6},
		{"redlab_inventory_store_duration_seconds", map[string]string{"op": "read"}, 6},
		{"redlab_inventory_store_duration_seconds", map[string]string{"op": "write"}, 6},
		{"redlab_inventory_store_duration_seconds", map[string]string{"op": "next_fence"}, 2},
		{"redlab_inventory_store_duration_seconds", map[string]string{"op": "fence"}, 2},
		// The lock clients' metrics carry their guard.
		{"redlock_attempts_total", map[string]string{"guard": "redlock", "result": "granted"}, 4},
		{"redlock_attempts_total", map[string]string{"guard": "redlock-fenced", "result": "granted"}, 2},
		{"redlock_releases_total", map[string]string{"guard": "redlock", "result": "released"}, 4},
		{"redlock_circuit_breaker_state", map[string]string{"guard": "redlock", "state": "closed"}, 2},
		{"redlock_acquire_duration_seconds", map[string]string{"guard": "redlock-fenced", "result": "granted"}, 2},
	} {
		if got := sumOf(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v: got %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestHandlerOfAMeteredService: when the service records its reservations
// (WithMetrics), the handler on the same registry does not count them again,
// and still counts what never reaches the service.
func TestHandlerOfAMeteredService(t *testing.T) {
	store := openStore(t, "sqlite:"+t.TempDir()+"/inv.db")
	seed(t, store, "widget", 5)
	reg := prometheus.NewPedanticRegistry()
	svc := replica(t, store, GuardDBAtomic, nil, WithHolder("api"), WithMetrics(reg))
	h := newTestHandler(t, svc, reg)
	if r := do(t, h, "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1,"request_id":"a"}`); r.status != 201 {
		t.Fatalf("reserve: got %d %s, want 201", r.status, r.raw)
	}
	if r := do(t, h, "POST", "/v1/reservations", jsonCT, `{"sku":`); r.status != 400 {
		t.Fatalf("bad JSON: got %d, want 400", r.status)
	}
	for _, tc := range []struct {
		outcome string
		want    float64
	}{{"reserved", 1}, {"invalid", 1}} {
		if got := sumOf(t, reg, "redlab_inventory_reservations_total", map[string]string{"guard": "db-atomic", "outcome": tc.outcome}); got != tc.want {
			t.Errorf("reservations{%s}: got %v, want %v", tc.outcome, got, tc.want)
		}
	}
	if got := sumOf(t, reg, "redlab_inventory_reservation_duration_seconds", nil); got != 1 {
		t.Errorf("reservation durations: got %v, want 1 (recorded once)", got)
	}
	if r := do(t, h, "GET", "/metrics", "", ""); !strings.Contains(r.raw, "redlab_inventory_store_duration_seconds_bucket") {
		t.Errorf("/metrics lacks the store latency:\n%s", r.raw)
	}
}

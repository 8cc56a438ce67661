package loadgen

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// runInventory runs a short load against in-process replicas and returns
// the report.
func runInventory(t *testing.T, cfg InventoryConfig, rate float64, d time.Duration, keys string) *Report {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	cfg.StoreDSN = "sqlite:" + filepath.Join(t.TempDir(), "inventory.db")
	rec := NewRecorder(len(cfg.Nodes), 0)
	cfg.Recorder = rec
	target, err := NewInventoryTarget(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Close() })
	sched, err := ConstantSchedule(rate, d, Shard{})
	if err != nil {
		t.Fatal(err)
	}
	ks, err := ParseKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	kg, err := NewKeyGen(ks, Shard{})
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := Execute(context.Background(), RunSpec{
		Out: dir, Stock: 100_000,
		Meta:   Meta{Target: "inventory", Guard: string(cfg.Guard), Nodes: cfg.Nodes, Keys: keys, Stages: FormatStages([]Stage{{d, rate}})},
		Engine: Config{Schedule: sched, Target: target, Keys: kg, Seed: 3, Recorder: rec, Interval: 250 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// everyNth pauses every nth critical section for d: a stop-the-world pause
// of the holder, the scenario no TTL lock survives.
func everyNth(n int64, d time.Duration) inventory.PauseHook {
	var count atomic.Int64
	return func(context.Context, inventory.Request) {
		if count.Add(1)%n == 0 {
			time.Sleep(d)
		}
	}
}

func TestNoLockLosesUpdates(t *testing.T) {
	// Read-modify-write without a lock, two replicas, one SKU, a short pause
	// between read and write, longer than the 10 ms between arrivals, so that
	// every operation overlaps the next: concurrent writers overwrite each other.
	r := runInventory(t, InventoryConfig{Replicas: 2, ReplicaConfig: inventory.ReplicaConfig{Guard: inventory.GuardNone,
		PauseHook: everyNth(1, 30*time.Millisecond)}}, 100, 400*time.Millisecond, "uniform:1")
	s := r.Summary
	if !s.Safety.AuditChecked || s.Safety.LostUpdates == 0 {
		t.Errorf("safety = %+v: want the audit to find lost updates", s.Safety)
	}
	if s.Safety.DoubleGrantsChecked || s.AcquireLatencyMs.Count != 0 {
		t.Errorf("guard none takes no lock: double grants checked %v, %d acquire samples", s.Safety.DoubleGrantsChecked, s.AcquireLatencyMs.Count)
	}
}

// TestDBGuardsUnderContention: TestNoLockLosesUpdates's load, where every
// operation overlaps the next, through the guards that let the database
// decide: nothing is lost; db-version's writes conflict and are counted,
// db-for-update's waits are its acquire times. Both survive the run
// directory's round trip.
func TestDBGuardsUnderContention(t *testing.T) {
	for _, g := range []inventory.Guard{inventory.GuardDBVersion, inventory.GuardDBForUpdate} {
		t.Run(string(g), func(t *testing.T) {
			r := runInventory(t, InventoryConfig{Replicas: 2, ReplicaConfig: inventory.ReplicaConfig{Guard: g, AcquireTimeout: 20 * time.Second,
				PauseHook: everyNth(1, 30*time.Millisecond)}}, 100, 400*time.Millisecond, "uniform:1")
			s := r.Summary
			if !s.Safety.AuditChecked || s.Safety.LostUpdates != 0 || s.Safety.Oversell != 0 || s.Safety.DoubleGrantsChecked {
				t.Errorf("safety = %+v: want the audit, no lost updates, no double-grant check (no Redis lock)", s.Safety)
			}
			if s.Outcomes["reserved"] == 0 || s.AcquireLatencyMs.Count == 0 || s.Attempts.Count == 0 {
				t.Errorf("summary: %d reserved, %d acquire samples, %d attempt samples; want some of each", s.Outcomes["reserved"], s.AcquireLatencyMs.Count, s.Attempts.Count)
			}
			if got := s.VersionConflicts > 0; got != (g == inventory.GuardDBVersion) {
				t.Errorf("version conflicts: got %d, want them for db-version only", s.VersionConflicts)
			}
			back, err := LoadReport(r.Dir)
			if err != nil {
				t.Fatal(err)
			}
			if back.Summary.VersionConflicts != s.VersionConflicts || back.Summary.Outcomes["version_conflict"] != s.Outcomes["version_conflict"] {
				t.Errorf("read back: %d conflicts, %d out of tries; want %d, %d", back.Summary.VersionConflicts, back.Summary.Outcomes["version_conflict"],
					s.VersionConflicts, s.Outcomes["version_conflict"])
			}
			t.Logf("%d requests: %d reserved, %d out of tries, %d version conflicts; attempts mean %.2f; acquire p99 %.1f ms",
				s.Requests, s.Outcomes["reserved"], s.Outcomes["version_conflict"], s.VersionConflicts, s.Attempts.Mean, s.AcquireLatencyMs.P99)
		})
	}
}

func TestRedlockSafeWithoutFaults(t *testing.T) {
	c := redlocktest.Start(t, 3, redlocktest.Options{})
	r := runInventory(t, InventoryConfig{Replicas: 2, ReplicaConfig: inventory.ReplicaConfig{Nodes: c.Addrs(), Guard: inventory.GuardRedlock,
		NodeTimeout: time.Second, LockTTL: 30 * time.Second, AcquireTimeout: 20 * time.Second}}, 40, time.Second, "hot:10:0.7")
	s := r.Summary
	if !s.Safety.DoubleGrantsChecked || !s.Safety.AuditChecked {
		t.Fatalf("safety = %+v: want both checks", s.Safety)
	}
	if s.Safety.DoubleGrants != 0 || s.Safety.LostUpdates != 0 || s.Safety.Oversell != 0 {
		t.Errorf("safety = %+v: want no violations", s.Safety)
	}
	if s.Outcomes["reserved"] == 0 || s.AcquireLatencyMs.Count != s.Requests || s.PerNode[1].Outcomes["granted"] == 0 {
		t.Errorf("summary: %d reserved, %d acquire samples of %d, node2 %v", s.Outcomes["reserved"], s.AcquireLatencyMs.Count, s.Requests, s.PerNode[1].Outcomes)
	}
}

func TestPausedHolderIsCaught(t *testing.T) {
	c := redlocktest.Start(t, 3, redlocktest.Options{})
	// Every third holder stalls for 4x the TTL while holding the lock on
	// the one SKU: its lock expires, another replica takes it, and both
	// believe they hold it.
	cfg := InventoryConfig{Replicas: 2, ReplicaConfig: inventory.ReplicaConfig{Nodes: c.Addrs(), LockTTL: 250 * time.Millisecond,
		NodeTimeout: 100 * time.Millisecond, AcquireTimeout: 10 * time.Second, PauseHook: everyNth(3, time.Second)}}

	cfg.Guard = inventory.GuardRedlock
	s := runInventory(t, cfg, 10, 1200*time.Millisecond, "uniform:1").Summary
	if s.Safety.DoubleGrants == 0 || len(s.Safety.Examples) == 0 {
		t.Errorf("redlock under holder pauses: safety %+v, want double grants found", s.Safety)
	}
	if s.Safety.LostUpdates == 0 {
		t.Errorf("redlock under holder pauses: want lost updates, got %+v", s.Safety)
	}

	cfg.Guard = inventory.GuardRedlockFenced
	cfg.PauseHook = everyNth(3, time.Second)
	s = runInventory(t, cfg, 10, 1200*time.Millisecond, "uniform:1").Summary
	if s.Safety.DoubleGrants == 0 || s.Safety.FencedRejections == 0 || s.Outcomes["fenced"] == 0 {
		t.Errorf("fenced redlock under holder pauses: safety %+v outcomes %v, want overlaps caught by the fence", s.Safety, s.Outcomes)
	}
	if s.Safety.LostUpdates != 0 || s.Safety.Oversell != 0 {
		t.Errorf("fenced redlock: safety %+v, want the store intact", s.Safety)
	}
}

func TestHTTPTarget(t *testing.T) {
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "inventory.db")
	store, err := inventory.OpenStore(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc, err := inventory.NewService(store, inventory.GuardDBAtomic, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := inventory.NewHandler(svc, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	for _, withStore := range []bool{false, true} {
		cfg := HTTPConfig{URLs: []string{srv.URL, srv.URL + "/"}}
		if withStore {
			cfg.StoreDSN = dsn
		}
		target, err := NewHTTPTarget(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if target.Guard() != string(inventory.GuardDBAtomic) {
			t.Errorf("guard = %q, want db-atomic", target.Guard())
		}
		sched, _ := ConstantSchedule(100, 300*time.Millisecond, Shard{})
		ks, _ := ParseKeys("uniform:3")
		kg, _ := NewKeyGen(ks, Shard{})
		dir := filepath.Join(t.TempDir(), "run")
		r, _, err := Execute(ctx, RunSpec{Out: dir, Stock: 100, Meta: Meta{Target: "http", Keys: "uniform:3", Stages: "300ms:100"},
			Engine: Config{Schedule: sched, Target: target, Keys: kg, Seed: 1, Interval: 100 * time.Millisecond}})
		target.Close()
		if err != nil {
			t.Fatal(err)
		}
		s := r.Summary
		if s.Outcomes["reserved"] != 30 || s.Requests != 30 {
			t.Errorf("store=%v: outcomes %v, want 30 reserved", withStore, s.Outcomes)
		}
		if s.Safety.AuditChecked != withStore || s.Safety.LostUpdates != 0 {
			t.Errorf("store=%v: safety %+v", withStore, s.Safety)
		}
		var left int64
		for _, sku := range kg.Names() {
			n, err := store.Stock(ctx, sku)
			if err != nil {
				t.Fatal(err)
			}
			left += n
		}
		if left != 300-30 {
			t.Errorf("store=%v: %d units left, want 270 (3 SKUs seeded with 100, 30 reserved)", withStore, left)
		}
	}
	if _, err := NewHTTPTarget(ctx, HTTPConfig{URLs: []string{"http://127.0.0.1:1"}, Timeout: time.Second}); err == nil {
		t.Error("unreachable target: got nil error")
	}
}

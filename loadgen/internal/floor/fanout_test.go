package floor

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

func TestMeasureFanout(t *testing.T) {
	const user, password = "floor", "floor-password-0123456789"
	for _, fsync := range []string{"always", "everysec"} {
		t.Run(fsync, func(t *testing.T) {
			// The lab's nodes take ACL logins, and its redlock user may
			// touch only keys under "lock:"; so do these.
			c := redlocktest.Start(t, 5, redlocktest.Options{AppendFsync: fsync,
				Extra: []string{"user " + user + " on >" + password + " resetkeys ~lock:* +@all"}})
			nodes := redlock.NewNodes(c.Addrs(), redlock.WithPoolSize(8), redlock.WithAuth(user, password),
				redlock.WithNodeTimeout(time.Second))
			t.Cleanup(func() {
				for _, n := range nodes {
					n.Close()
				}
			})
			f, err := MeasureFanout(context.Background(), nodes, 8, 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if f.Nodes != 5 || f.Workers != 8 {
				t.Errorf("got %d nodes and %d workers, want 5 and 8", f.Nodes, f.Workers)
			}
			if f.Cycles < 8 || f.LocksPerS <= 0 {
				t.Errorf("got %d cycles, %g locks/s, want at least 8 and more than 0/s", f.Cycles, f.LocksPerS)
			}
			if f.Errors != 0 || f.FirstError != "" {
				t.Errorf("got %d errors (first: %s), want 0", f.Errors, f.FirstError)
			}
			// Every cycle deleted its key.
			for i, n := range nodes {
				if keys, err := n.Keys(context.Background(), "lock:floor-*").Result(); err != nil || len(keys) != 0 {
					t.Errorf("node %d: got keys %q (%v), want none", i, keys, err)
				}
			}
		})
	}
}

func TestMeasureFanoutNoQuorum(t *testing.T) {
	c := redlocktest.Start(t, 3, redlocktest.Options{AppendFsync: "everysec"})
	nodes := redlock.NewNodes(c.Addrs(), redlock.WithNodeTimeout(100*time.Millisecond))
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	c.Nodes[0].Kill()
	c.Nodes[1].Kill()
	f, err := MeasureFanout(context.Background(), nodes, 2, 50*time.Millisecond)
	if err == nil {
		t.Fatalf("got nil error and %+v, want no quorum", f)
	}
	if f.Cycles != 0 || f.Errors < 2 {
		t.Errorf("got %d cycles and %d errors, want 0 and at least 2", f.Cycles, f.Errors)
	}
}

func TestMeasureClient(t *testing.T) {
	const user, password = "floor", "floor-password-0123456789"
	c := redlocktest.Start(t, 5, redlocktest.Options{AppendFsync: "everysec",
		Extra: []string{"user " + user + " on >" + password + " resetkeys ~lock:* +@all"}})
	nodes := redlock.NewNodes(c.Addrs(), redlock.WithPoolSize(16), redlock.WithAuth(user, password), redlock.WithNodeTimeout(time.Second))
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	dir := t.TempDir()
	got, err := MeasureClient(context.Background(), nodes, dir, 200, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// 200/s for 300 ms: 60 operations due, the first at once.
	if got.Ops != 60 || got.Errors != 0 || got.Nodes != 5 || got.Rate != 200 {
		t.Errorf("got %d operations, %d errors (%s), %d nodes at %v/s; want 60, 0, 5 at 200/s", got.Ops, got.Errors, got.FirstError, got.Nodes, got.Rate)
	}
	if got.CPUS <= 0 || got.CPUMsPerOp <= 0 {
		t.Errorf("got %v s of CPU, %v ms per operation; want some", got.CPUS, got.CPUMsPerOp)
	}
	// Every operation reserved in the store, and released every key.
	store, err := inventory.OpenStore(context.Background(), "sqlite:"+filepath.Join(dir, "client.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ledger, err := store.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ledger) != 60 {
		t.Errorf("the ledger holds %d reservations, want 60", len(ledger))
	}
	for i, n := range nodes {
		if keys, err := n.Keys(context.Background(), "lock:client-*").Result(); err != nil || len(keys) != 0 {
			t.Errorf("node %d: got keys %q (%v), want none", i, keys, err)
		}
	}
}

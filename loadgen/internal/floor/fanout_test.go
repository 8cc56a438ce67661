package floor

import (
	"context"
	"testing"
	"time"

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

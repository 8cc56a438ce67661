package inventory

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestRedsyncConservesUnderContention: the redsync guard, with redsync's
// and go-redis's defaults, is a working lock when nothing fails: four
// replicas (each its own clients and store handle, as separate processes)
// reserve concurrently on three SKUs, and every SKU's books balance, no SKU
// is oversold and no two holds of one key overlap.
func TestRedsyncConservesUnderContention(t *testing.T) {
	c := startRedis(t, 3)
	dsn := sqliteDSN(t)
	const replicas, workers, perWorker, initial = 4, 4, 6, 1000 // 96 reservations on 3 SKUs
	skus := []string{"rs-a", "rs-b", "rs-c"}
	ctx := context.Background()
	tl := &tally{}
	var reps []*Replica
	for i := 0; i < replicas; i++ {
		r, err := OpenReplica(ctx, ReplicaConfig{
			StoreDSN: dsn, Guard: GuardRedsync, Nodes: c.Addrs(), Holder: fmt.Sprintf("replica-%d", i),
			LockTTL: 10 * time.Second, AcquireTimeout: 30 * time.Second, OnHold: tl.hold,
			// A little work inside the critical section makes the
			// read-modify-writes overlap if the lock lets them.
			PauseHook: func(context.Context, Request) { time.Sleep(2 * time.Millisecond) },
		})
		if err != nil {
			t.Fatalf("OpenReplica: %v", err)
		}
		t.Cleanup(func() { r.Close() })
		reps = append(reps, r)
	}
	for _, sku := range skus {
		seed(t, reps[0].Store(), sku, initial)
	}
	var wg sync.WaitGroup
	for ri, r := range reps {
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perWorker; i++ {
					sku := skus[(ri+w+i)%len(skus)]
					res, err := r.Service().Reserve(ctx, Request{SKU: sku, Quantity: 1, RequestID: fmt.Sprintf("rs-%d-%d-%d", ri, w, i)})
					tl.add(res, err)
				}
			}()
		}
	}
	wg.Wait()
	for _, err := range tl.unexpected {
		t.Errorf("unexpected reserve error: %v", err)
	}
	var units int64
	for _, sku := range skus {
		a := audit(t, reps[0].Store(), sku, initial)
		if a.Drift != 0 || a.Final < 0 {
			t.Errorf("%s: audit %+v, want drift 0 (no lost update) and no oversell", sku, a)
		}
		units += a.Reserved
	}
	if units != tl.units || tl.reserved == 0 {
		t.Errorf("ledger holds %d units, callers were told %d (%d reservations); want equal and > 0", units, tl.units, tl.reserved)
	}
	if int64(len(tl.holds)) != tl.reserved {
		t.Errorf("holds observed: got %d, want one per reservation (%d)", len(tl.holds), tl.reserved)
	}
	for _, h := range tl.holds {
		if h.Token == "" || !h.ValidUntil.After(h.Granted) {
			t.Errorf("hold %+v: want a token and a validity after the grant (redsync's Until)", h)
			break
		}
	}
	if dg := doubleGrants(tl.holds); dg != 0 {
		t.Errorf("double grants without faults: got %d, want 0", dg)
	}
	if tl.contended+tl.unavailable+tl.overloaded > 0 {
		t.Logf("%d contended, %d unavailable, %d overloaded (redsync gives up after 32 tries; allowed, stock still conserved)", tl.contended, tl.unavailable, tl.overloaded)
	}
}

// TestDeleteReleaseFreesAnotherHoldersLock is the mistake the redlock-del
// guard exists to show, step by step on real nodes. A's lock expires while
// A is inside its critical section; B acquires the key; A finishes and
// releases. With a plain DEL, A's release deletes B's key on every node
// while B still holds it; with the Lua compare-and-delete (redlock), B's
// key stays.
func TestDeleteReleaseFreesAnotherHoldersLock(t *testing.T) {
	cluster := startRedis(t, 3)
	const ttl = 300 * time.Millisecond
	for _, tt := range []struct {
		guard   Guard
		keptByB int // nodes still holding B's token after A's release; -1: all that held it
		want    string
	}{
		{GuardRedlockDel, 0, "none: A's DEL removed it"},
		{GuardRedlock, -1, "all: A's compare-and-delete saw another token and left it"},
		{GuardNodeRedlockDel, 0, "none: A's adapter's DEL removed it"},
		{GuardNodeRedlock, -1, "all: node-redlock's unlock script saw another token and left it"},
	} {
		t.Run(string(tt.guard), func(t *testing.T) {
			dsn := sqliteDSN(t)
			g := newGate(t)
			tl := &tally{}
			opts := []ServiceOption{WithLockTTL(ttl), WithAcquireTimeout(10 * time.Second), WithPauseHook(g.hook), WithHoldObserver(tl.hold)}
			a := replica(t, openStore(t, dsn), tt.guard, cluster, append(opts, WithHolder("A"))...)
			b := replica(t, openStore(t, dsn), tt.guard, cluster, append(opts, WithLockTTL(time.Minute), WithHolder("B"))...)
			sku := "del-" + string(tt.guard)
			seed(t, a.Store(), sku, 10)

			stepA := g.block(sku + "-a")
			resA := reserveAsync(a, Request{SKU: sku, Quantity: 1, RequestID: sku + "-a"})
			stepA.wait(t, "A", resA)
			// B retries until A's key expires on the nodes, then holds.
			stepB := g.block(sku + "-b")
			resB := reserveAsync(b, Request{SKU: sku, Quantity: 1, RequestID: sku + "-b"})
			stepB.wait(t, "B", resB)
			// B was granted on a quorum: those nodes hold its token now (the
			// last node's reply may still be on the way, or it refused while
			// A's key had not expired there yet; it is left out).
			tokenB := map[int]string{}
			for i, n := range cluster.Nodes {
				if v, _ := n.Client().Get(context.Background(), lockKey(sku)).Result(); v != "" {
					tokenB[i] = v
				}
			}
			if len(tokenB) < len(cluster.Nodes)/2+1 {
				t.Fatalf("B holds the lock, but its key is on %d of %d nodes", len(tokenB), len(cluster.Nodes))
			}
			stepA.let()
			await(t, resA, "A") // A's release has returned
			kept := 0
			for i, tok := range tokenB {
				if v, _ := cluster.Nodes[i].Client().Get(context.Background(), lockKey(sku)).Result(); v == tok {
					kept++
				}
			}
			if want := tt.keptByB; want < 0 && kept != len(tokenB) || want >= 0 && kept != want {
				t.Errorf("after A's release: B's key on %d of the %d nodes that held it, want %s", kept, len(tokenB), tt.want)
			}
			stepB.let()
			if r := await(t, resB, "B"); r.err != nil {
				t.Errorf("B: %v", r.err)
			}
			if len(tl.holds) != 2 {
				t.Fatalf("holds: got %d, want A's and B's", len(tl.holds))
			}
			for _, h := range tl.holds {
				if !h.ValidUntil.After(h.Granted) || h.Token == "" {
					t.Errorf("hold %+v: want a token and a validity, like every lock guard", h)
				}
			}
		})
	}
}

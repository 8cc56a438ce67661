package inventory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/redlocklab/redlocklab/internal/etcdtest"
)

// etcdReplica is one Service of an etcd guard with its own etcd client, as
// a separate process would have; both are closed at cleanup.
func etcdReplica(t *testing.T, store *Store, guard Guard, c *etcdtest.Cluster, opts ...ServiceOption) *Service {
	t.Helper()
	s, err := NewService(store, guard, nil, append([]ServiceOption{WithEtcd(c.Client())}, opts...)...)
	if err != nil {
		t.Fatalf("NewService(%s): %v", guard, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// lockerOf is the etcd guard's locker of s.
func lockerOf(t *testing.T, s *Service) *etcdLocker {
	t.Helper()
	switch g := s.g.(type) {
	case *etcdGuard:
		return g.l
	case *etcdFencedGuard:
		return g.l
	}
	t.Fatalf("guard %s has no etcd locker", s.guard)
	return nil
}

// TestEtcdConservation: on a three-member cluster, two replicas' workers
// hammer one hot SKU; the etcd lock lets one at a time in, so stock is
// conserved, no two holds overlap, and the tokens (the lock key's create
// revision) grow with each new holder.
func TestEtcdConservation(t *testing.T) {
	cluster := etcdtest.Start(t, 3, etcdtest.Options{})
	const replicas, workers, perWorker = 2, 6, 5 // 60 requests
	const initial = 45
	forEachStore(t, func(t *testing.T, dsn string) {
		for _, g := range []Guard{GuardEtcd, GuardEtcdFenced} {
			t.Run(string(g), func(t *testing.T) {
				sku := "conserve-" + string(g)
				tl := &tally{}
				var reps []*Service
				for i := 0; i < replicas; i++ {
					reps = append(reps, etcdReplica(t, openStore(t, dsn), g, cluster,
						WithHolder(fmt.Sprintf("replica-%d", i)), WithAcquireTimeout(30*time.Second), WithHoldObserver(tl.hold)))
				}
				seed(t, reps[0].Store(), sku, initial)
				res := hammer(t, reps, workers, perWorker, sku, sku)
				a := checkConserved(t, reps[0].Store(), sku, initial, res)
				if res.contended+res.unavailable > 0 || res.reserved != initial || a.Final != 0 {
					t.Errorf("got %d reserved, %d contended, %d unavailable, final %d; want %d, 0, 0, 0",
						res.reserved, res.contended, res.unavailable, a.Final, initial)
				}
				if len(tl.holds) != replicas*workers*perWorker {
					t.Errorf("holds: got %d, want one per request (%d)", len(tl.holds), replicas*workers*perWorker)
				}
				if dg := doubleGrants(tl.holds); dg > 0 {
					t.Errorf("double grants without faults: got %d, want 0", dg)
				}
				holds := slices.Clone(tl.holds)
				slices.SortFunc(holds, func(a, b Hold) int { return a.Granted.Compare(b.Granted) })
				var last int64
				for i, h := range holds {
					rev, err := strconv.ParseInt(h.Token, 10, 64)
					if err != nil || rev <= last {
						t.Fatalf("hold %d (%s): token %q after %d; want a revision greater than the previous holder's", i, h.Holder, h.Token, last)
					}
					last = rev
					if !h.ValidUntil.After(h.Released) {
						t.Errorf("hold %d: valid until %v, released %v; want the kept-alive lease to outlast a short hold", i, h.ValidUntil, h.Released)
					}
				}
			})
		}
	})

	// Readiness counts the members that answer against the quorum of the
	// cluster's three.
	store := openStore(t, "sqlite:"+t.TempDir()+"/ready.db")
	svc := etcdReplica(t, store, GuardEtcd, cluster)
	ctx := context.Background()
	if rd := svc.Readiness(ctx); !rd.Ready() || rd.NodesUp != 3 || rd.Quorum != 2 {
		t.Errorf("readiness of 3 members: got %+v, want ready, 3 up, quorum 2", rd)
	}
	cluster.Members[0].Kill()
	if rd := svc.Readiness(ctx); !rd.Ready() || rd.NodesUp != 2 || rd.Quorum != 2 {
		t.Errorf("readiness with one member down: got %+v, want ready, 2 up, quorum 2", rd)
	}
	cluster.Members[1].Kill()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if rd := svc.Readiness(rctx); rd.Ready() || rd.Lock == nil || rd.NodesUp != 1 || rd.Quorum != 2 {
		t.Errorf("readiness with two members down: got %+v, want not ready, 1 up, quorum 2", rd)
	}
}

// TestEtcdPauseScenario is TestPauseScenario on etcd. Holder A reads, then
// stops inside its critical section, and stops as a whole process does:
// its keep-alives are held back too (etcdLocker.freeze), so its lease runs
// out on the server after the TTL and B, queued behind A, gets the lock.
// This is the honest model of a process pause; revoking A's lease from
// outside would model a lease lost some other way, and pausing only A's
// goroutine would not expire anything, since A's keep-alives would go on
// (TestEtcdKeepAliveOutlivesTTL).
//
// Without a fence the lock is granted twice and A's write loses B's update;
// with the lock key's revision as the fence, A's stale write is rejected.
// Neither is a lock violation: A's validity, as its client knew it, ended
// before B's grant.
func TestEtcdPauseScenario(t *testing.T) {
	cluster := etcdtest.Start(t, 1, etcdtest.Options{})
	const ttl = MinEtcdLockTTL
	tests := []pauseCase{
		{GuardEtcd, "sequential", nil, 1, 0, 2},
		{GuardEtcd, "interleaved", nil, 1, 0, 2},
		{GuardEtcdFenced, "sequential", ErrFenced, 0, 1, 1},
		{GuardEtcdFenced, "interleaved", ErrFenced, 0, 1, 1},
	}
	forEachStore(t, func(t *testing.T, dsn string) {
		for _, tt := range tests {
			t.Run(string(tt.guard)+"/"+tt.schedule, func(t *testing.T) {
				g := newGate(t)
				tl := &tally{}
				var aLocker *etcdLocker
				// A's whole process pauses: its keep-alives stop with it
				// until the gate lets it go.
				pauseA := func(ctx context.Context, req Request) {
					thaw := aLocker.freeze()
					defer thaw()
					g.hook(ctx, req)
				}
				opts := []ServiceOption{WithLockTTL(ttl), WithAcquireTimeout(30 * time.Second), WithHoldObserver(tl.hold)}
				a := etcdReplica(t, openStore(t, dsn), tt.guard, cluster, append(opts, WithHolder("A"), WithPauseHook(pauseA))...)
				aLocker = lockerOf(t, a)
				b := etcdReplica(t, openStore(t, dsn), tt.guard, cluster, append(opts, WithHolder("B"), WithPauseHook(g.hook))...)
				// B waits in etcd's queue until A's lease expires.
				tt.run(t, g, a, b)
				if len(tl.holds) != 2 {
					t.Fatalf("holds: got %d, want 2", len(tl.holds))
				}
				if dg := doubleGrants(tl.holds); dg != 1 {
					t.Errorf("double grants: got %d, want 1 (A's lease expired while it was paused, and B got the lock)", dg)
				}
				if lv := lockViolations(tl.holds); lv != 0 {
					t.Errorf("lock violations: got %d, want 0 (A's validity ended before B's grant): %+v", lv, tl.holds)
				}
			})
		}
	})
}

// TestEtcdKeepAliveOutlivesTTL: a holder whose goroutine stops in its
// critical section for longer than the TTL, while the rest of its process
// runs, keeps the lock: its keep-alives go on. B waits for A's release, so
// nothing is granted twice and nothing is lost. (The same pause costs a
// Redlock holder its lock: TestPauseScenario.)
func TestEtcdKeepAliveOutlivesTTL(t *testing.T) {
	cluster := etcdtest.Start(t, 1, etcdtest.Options{})
	g := newGate(t)
	tl := &tally{}
	dsn := "sqlite:" + t.TempDir() + "/inv.db"
	opts := []ServiceOption{WithLockTTL(MinEtcdLockTTL), WithAcquireTimeout(30 * time.Second), WithHoldObserver(tl.hold), WithPauseHook(g.hook)}
	a := etcdReplica(t, openStore(t, dsn), GuardEtcd, cluster, append(opts, WithHolder("A"))...)
	b := etcdReplica(t, openStore(t, dsn), GuardEtcd, cluster, append(opts, WithHolder("B"))...)
	seed(t, a.Store(), "kept", 10)

	stepA := g.block("kept-a")
	resA := reserveAsync(a, Request{SKU: "kept", Quantity: 1, RequestID: "kept-a"})
	stepA.wait(t, "A", resA)
	resB := reserveAsync(b, Request{SKU: "kept", Quantity: 1, RequestID: "kept-b"})
	// Twice the TTL: without its keep-alives A's lease would be gone.
	time.Sleep(2 * MinEtcdLockTTL)
	select {
	case r := <-resB:
		t.Fatalf("B returned (%+v, %v) while A held the lock", r.r, r.err)
	default:
	}
	stepA.let()
	if r := await(t, resA, "A"); r.err != nil {
		t.Errorf("A: got %v, want success", r.err)
	}
	if r := await(t, resB, "B"); r.err != nil {
		t.Errorf("B: got %v, want success", r.err)
	}
	if au := audit(t, a.Store(), "kept", 10); au.Drift != 0 || au.Reservations != 2 || au.Final != 8 {
		t.Errorf("audit: got %+v, want 2 reservations, final 8, drift 0", au)
	}
	if dg := doubleGrants(tl.holds); dg != 0 || len(tl.holds) != 2 {
		t.Errorf("got %d holds, %d double grants; want 2, 0", len(tl.holds), dg)
	}
}

// TestEtcdLockErrors: a lock held elsewhere for the whole acquire timeout
// is "contended" (and the waiter leaves no key behind); a cluster that is
// gone is "unavailable", for a replica with a pooled session and one
// without; a canceled context stays a context error; a TTL etcd cannot
// grant is refused.
func TestEtcdLockErrors(t *testing.T) {
	cluster := etcdtest.Start(t, 1, etcdtest.Options{})
	store := openStore(t, "sqlite:"+t.TempDir()+"/inv.db")
	seed(t, store, "held", 10)
	seed(t, store, "free", 10)
	ctx := context.Background()

	for _, g := range []Guard{GuardEtcd, GuardEtcdFenced} {
		t.Run("contended/"+string(g), func(t *testing.T) {
			// Someone else holds the SKU's lock through etcd's own API.
			other := cluster.Client()
			sess, err := concurrency.NewSession(other, concurrency.WithTTL(10))
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			m := concurrency.NewMutex(sess, etcdLockPrefix("held"))
			if err := m.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			defer m.Unlock(ctx)

			svc := etcdReplica(t, store, g, cluster, WithAcquireTimeout(500*time.Millisecond))
			_, err = svc.Reserve(ctx, Request{SKU: "held", Quantity: 1, RequestID: "c-" + string(g)})
			checkErr(t, "Reserve", err, ErrContended)
			var re *ReserveError
			if errors.As(err, &re) && (re.Timing.Attempts < 1 || re.Timing.Acquire <= 0) {
				t.Errorf("timing of a contended acquire: got %+v, want attempts >= 1 and a positive acquire time", re.Timing)
			}
			keys, err := other.Get(ctx, etcdLockPrefix("held")+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				t.Fatal(err)
			}
			if len(keys.Kvs) != 1 || string(keys.Kvs[0].Key) != m.Key() {
				t.Errorf("lock keys after the timed-out waiter: got %d (%v), want only the holder's %s", len(keys.Kvs), keys.Kvs, m.Key())
			}
		})
	}

	t.Run("canceled", func(t *testing.T) {
		svc := etcdReplica(t, store, GuardEtcd, cluster)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := svc.Reserve(cctx, Request{SKU: "free", Quantity: 1, RequestID: "x-canceled"})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("canceled context: got %v, want context.Canceled", err)
		}
	})

	t.Run("ttl", func(t *testing.T) {
		for _, g := range []Guard{GuardEtcd, GuardEtcdFenced} {
			_, err := NewService(store, g, nil, WithEtcd(cluster.Client()), WithLockTTL(1500*time.Millisecond))
			if err == nil || !strings.Contains(err.Error(), "minimum lease TTL of 2s") || !strings.HasPrefix(err.Error(), "inventory: ") {
				t.Errorf("%s with a 1.5s TTL: got %v, want an inventory: error naming etcd's 2s minimum", g, err)
			}
		}
		svc := etcdReplica(t, store, GuardEtcd, cluster, WithLockTTL(2500*time.Millisecond))
		if got := lockerOf(t, svc).ttl; got != 3 {
			t.Errorf("lease TTL for a 2.5s lock TTL: got %ds, want 3s (rounded up)", got)
		}
		if _, err := svc.Reserve(ctx, Request{SKU: "free", Quantity: 1, RequestID: "ttl-1"}); err != nil {
			t.Errorf("Reserve with a 2.5s TTL: %v", err)
		}
	})

	t.Run("ready", func(t *testing.T) {
		svc := etcdReplica(t, store, GuardEtcd, cluster)
		if rd := svc.Readiness(ctx); !rd.Ready() || rd.NodesUp != 1 || rd.Quorum != 1 {
			t.Errorf("readiness: got %+v, want ready with 1 up, quorum 1", rd)
		}
	})

	t.Run("unavailable", func(t *testing.T) {
		down := etcdtest.Start(t, 1, etcdtest.Options{})
		opts := []ServiceOption{WithAcquireTimeout(500 * time.Millisecond)}
		pooled := etcdReplica(t, store, GuardEtcdFenced, down, opts...)
		// A reservation leaves a session in the pool.
		if _, err := pooled.Reserve(ctx, Request{SKU: "free", Quantity: 1, RequestID: "u-warm"}); err != nil {
			t.Fatalf("Reserve before the cluster goes: %v", err)
		}
		fresh := etcdReplica(t, store, GuardEtcd, down, opts...)
		down.Members[0].Kill()
		for name, svc := range map[string]*Service{"pooled session": pooled, "no session": fresh} {
			_, err := svc.Reserve(ctx, Request{SKU: "free", Quantity: 1, RequestID: "u-" + strings.ReplaceAll(name, " ", "-")})
			checkErr(t, name, err, ErrUnavailable)
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			if rd := svc.Readiness(rctx); rd.Ready() || rd.Lock == nil || rd.Store != nil || rd.NodesUp != 0 {
				t.Errorf("%s: readiness with the cluster down: got %+v, want store ok, lock failing, 0 up", name, rd)
			}
			cancel()
		}
	})
}

package inventory

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestDBVersionConservesUnderContention: many writers on one hot SKU, with
// the pause between read and write that makes guard none lose updates
// (TestNoneLosesUpdates), conserve stock exactly; their writes conflict, and
// the conflicts are retried.
func TestDBVersionConservesUnderContention(t *testing.T) {
	forEachStore(t, func(t *testing.T, dsn string) {
		const replicas, workers, perWorker = 3, 4, 5
		res, a := hammerHot(t, dsn, GuardDBVersion, 1000, replicas, workers, perWorker)
		if a.Drift != 0 || a.Final < 0 {
			t.Errorf("audit: got %+v, want drift 0 and final >= 0", a)
		}
		if a.Reserved != res.units || a.Reservations != res.reserved {
			t.Errorf("ledger: got %d units in %d rows, want %d in %d (what the callers were told)", a.Reserved, a.Reservations, res.units, res.reserved)
		}
		if res.reserved == 0 {
			t.Fatalf("nothing reserved (%d conflict): conservation was not put to the test", res.conflict)
		}
		if res.conflicts == 0 {
			t.Errorf("no version conflict among %d concurrent writers of one SKU: the guard (or the test) does not contend", replicas*workers)
		}
		// Every try ends in a conflict or in the try's outcome: a request
		// that reserved lost Attempts−1 tries, one that ran out lost all.
		n := int64(replicas * workers * perWorker)
		if want := res.conflicts + n - res.conflict; res.tries != want {
			t.Errorf("tries: got %d, want %d (%d conflicts + %d requests − %d out of tries)", res.tries, want, res.conflicts, n, res.conflict)
		}
		t.Logf("%d requests: %d reserved, %d out of tries; %d tries, %d conflicts (%.2f tries per request)",
			n, res.reserved, res.conflict, res.tries, res.conflicts, float64(res.tries)/float64(n))
	})
}

// TestDBVersionPauseScenario is TestPauseScenario's schedules for the
// optimistic guard: whoever writes second finds the version changed, reads
// again and retries, so nothing is lost and nobody waited on a lock.
func TestDBVersionPauseScenario(t *testing.T) {
	forEachStore(t, func(t *testing.T, dsn string) {
		for _, schedule := range []string{"sequential", "interleaved"} {
			t.Run(schedule, func(t *testing.T) {
				g := newGate(t)
				a := replica(t, openStore(t, dsn), GuardDBVersion, nil, WithHolder("A"), WithPauseHook(g.hook))
				b := replica(t, openStore(t, dsn), GuardDBVersion, nil, WithHolder("B"), WithPauseHook(g.hook))
				sku := "version-pause-" + schedule
				seed(t, a.Store(), sku, 10)
				idA, idB := sku+"-a", sku+"-b"
				stepA := g.block(idA)
				chA := reserveAsync(a, Request{SKU: sku, Quantity: 1, RequestID: idA})
				stepA.wait(t, "A", chA)

				// late is the writer that read before the other wrote.
				var resA, resB result
				var late *result
				if schedule == "sequential" {
					resB = await(t, reserveAsync(b, Request{SKU: sku, Quantity: 1, RequestID: idB}), "B")
					stepA.let()
					resA = await(t, chA, "A")
					late = &resA
				} else {
					stepB := g.block(idB)
					chB := reserveAsync(b, Request{SKU: sku, Quantity: 1, RequestID: idB})
					stepB.wait(t, "B", chB)
					stepA.let()
					resA = await(t, chA, "A")
					stepB.let()
					resB = await(t, chB, "B")
					late = &resB
				}
				if resA.err != nil || resB.err != nil {
					t.Fatalf("got A %v, B %v; want both to reserve", resA.err, resB.err)
				}
				for _, r := range []*result{&resA, &resB} {
					want := Timing{Attempts: 1}
					if r == late {
						want = Timing{Attempts: 2, Conflicts: 1}
					}
					if got := r.r.Timing; got.Attempts != want.Attempts || got.Conflicts != want.Conflicts {
						t.Errorf("%s: got %d attempts, %d conflicts; want %d, %d", r.r.Holder, got.Attempts, got.Conflicts, want.Attempts, want.Conflicts)
					}
				}
				if au := audit(t, a.Store(), sku, 10); au.Drift != 0 || au.Final != 8 || au.Reservations != 2 {
					t.Errorf("audit: got %+v, want final 8 in 2 reservations, drift 0", au)
				}
			})
		}
	})
}

// bumper is a pause hook that, every time the victim request pauses,
// commits another reservation of the same SKU through other: the victim's
// write then always finds the version changed.
type bumper struct {
	victim string
	other  atomic.Pointer[Service]
	n      atomic.Int64
	errs   chan error
}

func newBumper(victim string) *bumper { return &bumper{victim: victim, errs: make(chan error, 64)} }

func (b *bumper) hook(ctx context.Context, req Request) {
	if req.RequestID != b.victim {
		return
	}
	n := b.n.Add(1)
	if _, err := b.other.Load().Reserve(ctx, Request{SKU: req.SKU, Quantity: 1, RequestID: b.victim + "-bump-" + strconv.FormatInt(n, 10)}); err != nil {
		b.errs <- err
	}
}

func (b *bumper) check(t *testing.T) {
	t.Helper()
	close(b.errs)
	for err := range b.errs {
		t.Errorf("bump: %v", err)
	}
}

// TestDBVersionRetriesExhausted: a request whose row changes under every
// try gives up after versionTries with ErrConflict, its own outcome, having
// applied nothing.
func TestDBVersionRetriesExhausted(t *testing.T) {
	forEachStore(t, func(t *testing.T, dsn string) {
		store := openStore(t, dsn)
		b := newBumper("victim")
		victim := replica(t, store, GuardDBVersion, nil, WithHolder("victim"), WithPauseHook(b.hook))
		b.other.Store(replica(t, store, GuardDBVersion, nil, WithHolder("bumper")))
		seed(t, store, "contested", 100)

		_, err := victim.Reserve(context.Background(), Request{SKU: "contested", Quantity: 5, RequestID: "victim"})
		b.check(t)
		checkErr(t, "victim", err, ErrConflict)
		var re *ReserveError
		if errors.As(err, &re) && (re.Timing.Attempts != versionTries || re.Timing.Conflicts != versionTries) {
			t.Errorf("timing: got %d attempts, %d conflicts; want %d, %d", re.Timing.Attempts, re.Timing.Conflicts, versionTries, versionTries)
		}
		if errors.Is(err, ErrContended) || errors.Is(err, ErrUnavailable) {
			t.Errorf("got %v, want ErrConflict alone, not a lock error", err)
		}
		if _, ok, _ := store.Reservation(context.Background(), "victim"); ok {
			t.Error("the victim is in the ledger, want nothing applied")
		}
		if a := audit(t, store, "contested", 100); a.Drift != 0 || a.Reservations != versionTries || a.Final != 100-versionTries {
			t.Errorf("audit: got %+v, want the %d bumps only, drift 0", a, versionTries)
		}
	})
}

// The out-of-tries outcome crosses HTTP as 409 version_conflict with its
// Retry-After and the tries in Server-Timing, and the client turns it back
// into ErrConflict.
func TestDBVersionConflictHTTP(t *testing.T) {
	store := openStore(t, sqliteDSN(t))
	seed(t, store, "contested", 100)
	ctx := context.Background()

	b := newBumper("h-1")
	svc := replica(t, store, GuardDBVersion, nil, WithPauseHook(b.hook))
	b.other.Store(replica(t, store, GuardDBVersion, nil))
	h := newTestHandler(t, svc, nil)
	res := do(t, h, "POST", "/v1/reservations", jsonCT, `{"sku":"contested","quantity":1,"request_id":"h-1"}`)
	if res.status != 409 || res.code() != "version_conflict" || res.header.Get("Retry-After") != "1" {
		t.Errorf("got %d %q Retry-After %q, want 409 version_conflict with Retry-After 1", res.status, res.code(), res.header.Get("Retry-After"))
	}
	if m := serverTimingRE.FindStringSubmatch(res.header.Get("Server-Timing")); m == nil || m[1] != strconv.Itoa(versionTries) || m[2] != strconv.Itoa(versionTries) {
		t.Errorf("Server-Timing: got %q, want %d attempts and %d conflicts", res.header.Get("Server-Timing"), versionTries, versionTries)
	}

	b2 := newBumper("h-2")
	svc2 := replica(t, store, GuardDBVersion, nil, WithPauseHook(b2.hook))
	b2.other.Store(replica(t, store, GuardDBVersion, nil))
	c := newClient(t, serve(t, newTestHandler(t, svc2, nil)), 30*time.Second)
	_, err := c.Reserve(ctx, Request{SKU: "contested", Quantity: 1, RequestID: "h-2"})
	var re *ReserveError
	var ae *APIError
	if !errors.Is(err, ErrConflict) || !errors.As(err, &re) || !errors.As(err, &ae) || ae.Status != 409 || re.Timing.Conflicts != versionTries {
		t.Errorf("client: got %v (timing %+v), want ErrConflict, HTTP 409, %d conflicts", err, re, versionTries)
	}
	b.check(t)
	b2.check(t)
}

// A seed is a write: it moves the version on, so that a db-version reader
// from before it cannot overwrite the seeded stock.
func TestSeedBumpsVersion(t *testing.T) {
	forEachStore(t, func(t *testing.T, dsn string) {
		store := openStore(t, dsn)
		ctx := context.Background()
		seed(t, store, "v", 10)
		_, v0, err := store.stockVersion(ctx, "v")
		if err != nil {
			t.Fatal(err)
		}
		svc := replica(t, store, GuardDBVersion, nil)
		if _, err := svc.Reserve(ctx, Request{SKU: "v", Quantity: 1, RequestID: "v-1"}); err != nil {
			t.Fatal(err)
		}
		_, v1, _ := store.stockVersion(ctx, "v")
		seed(t, store, "v", 10)
		stock, v2, _ := store.stockVersion(ctx, "v")
		if v1 != v0+1 || v2 != v1+1 || stock != 10 {
			t.Errorf("versions: got %d, %d after a reservation, %d after a reseed (stock %d); want each one more, stock 10", v0, v1, v2, stock)
		}
		// A write carrying the version read before the reseed is refused.
		_, err = store.apply(ctx, write{mode: writeVersioned, req: Request{SKU: "v", Quantity: 1, RequestID: "stale"}, newStock: 8, version: v1, guard: GuardDBVersion})
		if !errors.Is(err, errVersionConflict) {
			t.Errorf("write with the pre-seed version: got %v, want errVersionConflict", err)
		}
	})
}

package inventory

import (
	"context"
	"testing"
	"time"
)

// TestDBForUpdateConservesUnderPause: with the pause between read and write
// that makes guard none lose updates (TestNoneLosesUpdates), the row lock
// serialises the writers: nothing is lost, nobody is refused.
func TestDBForUpdateConservesUnderPause(t *testing.T) {
	forEachStore(t, func(t *testing.T, dsn string) {
		const initial = 1000
		const replicas, workers, perWorker = 3, 4, 5
		res, a := hammerHot(t, dsn, GuardDBForUpdate, initial, replicas, workers, perWorker, WithAcquireTimeout(20*time.Second))
		n := int64(replicas * workers * perWorker)
		if a.Drift != 0 || a.Final != initial-n || a.Reservations != n || res.reserved != n {
			t.Errorf("got %d reserved, audit %+v; want all %d reserved, final %d, drift 0", res.reserved, a, n, initial-n)
		}
		if res.tries != n || res.conflicts != 0 {
			t.Errorf("timing: got %d attempts, %d conflicts; want one lock attempt per request, no conflicts", res.tries, res.conflicts)
		}
	})
}

// waitFor polls cond until it holds, failing the test after a generous
// bound (a wait for a state, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDBForUpdatePausedHolder: a holder paused inside its critical section
// keeps the lock. A waiter with a short bound gives up (PostgreSQL: the
// service's acquire timeout as lock_timeout, ErrContended; SQLite: the busy
// timeout, ErrUnavailable, because BEGIN IMMEDIATE locked the whole
// database). A patient waiter waits, reads after the holder's commit, and
// no update is lost.
func TestDBForUpdatePausedHolder(t *testing.T) {
	forEachStore(t, func(t *testing.T, dsn string) {
		g := newGate(t)
		holder := replica(t, openStore(t, dsn), GuardDBForUpdate, nil, WithHolder("A"), WithPauseHook(g.hook))
		patient := replica(t, openStore(t, dsn), GuardDBForUpdate, nil, WithHolder("C"), WithAcquireTimeout(30*time.Second))
		impatientStore, wantErr := openStore(t, dsn), ErrContended
		if impatientStore.dialect == dialectSQLite {
			// One connection, so that its busy timeout is the store's: 50 ms
			// instead of 5 s (a second busy_timeout in the DSN is applied
			// in no fixed order).
			impatientStore.db.SetMaxOpenConns(1)
			if _, err := impatientStore.db.Exec("PRAGMA busy_timeout = 50"); err != nil {
				t.Fatal(err)
			}
			wantErr = ErrUnavailable
		}
		impatient := replica(t, impatientStore, GuardDBForUpdate, nil, WithHolder("B"), WithAcquireTimeout(50*time.Millisecond))
		const sku = "paused-row"
		seed(t, holder.Store(), sku, 10)

		stepA := g.block("a")
		chA := reserveAsync(holder, Request{SKU: sku, Quantity: 1, RequestID: "a"})
		stepA.wait(t, "A", chA)

		_, err := impatient.Reserve(context.Background(), Request{SKU: sku, Quantity: 1, RequestID: "b"})
		checkErr(t, "B, the impatient waiter", err, wantErr)

		chC := reserveAsync(patient, Request{SKU: sku, Quantity: 1, RequestID: "c"})
		if pg := patient.Store(); pg.dialect == dialectPostgres {
			// C is queued behind A's row lock: it holds the tuple lock
			// and waits for A's transaction.
			waitFor(t, "C queued behind A's row lock", func() bool {
				var n int
				err := pg.db.QueryRow(`SELECT count(*) FROM pg_locks l
					JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace ns ON ns.oid = c.relnamespace
					WHERE l.locktype = 'tuple' AND c.relname = 'inventory' AND ns.nspname = current_schema()`).Scan(&n)
				return err == nil && n == 1
			})
		}
		select {
		case r := <-chC:
			t.Fatalf("C returned (%+v, %v) while A held the lock", r.r, r.err)
		default:
		}
		stepA.let()
		resA, resC := await(t, chA, "A"), await(t, chC, "C")
		if resA.err != nil || resC.err != nil {
			t.Fatalf("got A %v, C %v; want both to reserve", resA.err, resC.err)
		}
		if resC.r.ID <= resA.r.ID {
			t.Errorf("ledger order: got A %d, C %d; want C after A (C read after A committed)", resA.r.ID, resC.r.ID)
		}
		if a := audit(t, holder.Store(), sku, 10); a.Drift != 0 || a.Final != 8 || a.Reservations != 2 {
			t.Errorf("audit: got %+v, want final 8 in 2 reservations, drift 0", a)
		}
	})
}

package inventory

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestParseDSN(t *testing.T) {
	tests := []struct {
		dsn     string
		dialect dialect
		wantErr bool
	}{
		{"sqlite:/tmp/x.db", dialectSQLite, false},
		{"sqlite:./rel/x.db?_pragma=cache_size(-2000)", dialectSQLite, false},
		{"postgres://u:p@localhost:5432/db?sslmode=disable", dialectPostgres, false},
		{"postgresql://localhost/db", dialectPostgres, false},
		{"sqlite:", "", true},
		{"sqlite::memory:", "", true},
		{"mysql://localhost/db", "", true},
		{"/tmp/x.db", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		d, _, err := parseDSN(tt.dsn)
		if (err != nil) != tt.wantErr || d != tt.dialect {
			t.Errorf("parseDSN(%q) = %q, %v; want %q, error %v", tt.dsn, d, err, tt.dialect, tt.wantErr)
		}
		if got := CheckDSN(tt.dsn); (got != nil) != tt.wantErr {
			t.Errorf("CheckDSN(%q) = %v, want error %v", tt.dsn, got, tt.wantErr)
		}
	}
	if got, want := RedactDSN("postgres://u:secret@h/db"), "postgres://u:xxxxx@h/db"; got != want {
		t.Errorf("RedactDSN: got %q, want %q", got, want)
	}
}

func TestStoreBasics(t *testing.T) {
	forEachStore(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := openStore(t, dsn)
		// Migrations are idempotent: a second store on the same database.
		s2 := openStore(t, dsn)

		if _, err := s.Stock(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Stock(unknown): got %v, want ErrNotFound", err)
		}
		seed(t, s, "a", 10)
		if n, err := s2.Stock(ctx, "a"); err != nil || n != 10 {
			t.Errorf("Stock(a) via second store: got %d, %v; want 10, nil", n, err)
		}
		if err := s.Seed(ctx, "a", -1); !errors.Is(err, ErrInvalid) {
			t.Errorf("Seed(-1): got %v, want ErrInvalid", err)
		}
		if err := s.Seed(ctx, "bad sku", 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("Seed(bad sku): got %v, want ErrInvalid", err)
		}

		// Fencing tokens go up, whoever takes them.
		var last int64
		for i := 0; i < 3; i++ {
			for _, st := range []*Store{s, s2} {
				tok, err := st.nextFence(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if tok <= last {
					t.Fatalf("nextFence: got %d after %d, want increasing", tok, last)
				}
				last = tok
			}
		}

		// A blind write plus its ledger row; read back by request ID.
		r, err := s.apply(ctx, write{mode: writeBlind, req: Request{SKU: "a", Quantity: 3, RequestID: "r1"}, newStock: 7, guard: GuardNone, holder: "h"})
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
		got, ok, err := s2.Reservation(ctx, "r1")
		if err != nil || !ok {
			t.Fatalf("reservation(r1): %v, %v", ok, err)
		}
		if got.ID != r.ID || !got.CreatedAt.Equal(r.CreatedAt) || got.Quantity != 3 || got.Guard != GuardNone || got.Holder != "h" {
			t.Errorf("reservation(r1): got %+v, want %+v", got, r)
		}
		// The same request ID again: rolled back, stock untouched.
		if _, err := s.apply(ctx, write{mode: writeBlind, req: Request{SKU: "a", Quantity: 3, RequestID: "r1"}, newStock: 4}); !errors.Is(err, errReplay) {
			t.Errorf("apply(duplicate): got %v, want errReplay", err)
		}
		if a := audit(t, s, "a", 10); a.Final != 7 || a.Reserved != 3 || a.Reservations != 1 || a.Drift != 0 {
			t.Errorf("audit after one reservation: got %+v, want final 7, reserved 3 in 1, drift 0", a)
		}

		// Atomic decrement refuses to go below zero.
		if _, err := s.apply(ctx, write{mode: writeAtomic, req: Request{SKU: "a", Quantity: 8, RequestID: "r2"}}); !errors.Is(err, ErrOutOfStock) {
			t.Errorf("atomic over stock: got %v, want ErrOutOfStock", err)
		}
		if _, err := s.apply(ctx, write{mode: writeAtomic, req: Request{SKU: "zz", Quantity: 1, RequestID: "r3"}}); !errors.Is(err, ErrNotFound) {
			t.Errorf("atomic unknown sku: got %v, want ErrNotFound", err)
		}

		// Fence before the read: a newer token wins, the older is rejected
		// and counted.
		t1, _ := s.nextFence(ctx)
		t2, _ := s.nextFence(ctx)
		if err := s.fence(ctx, fenceStore, "a", t2); err != nil {
			t.Fatalf("fence(t2): %v", err)
		}
		if err := s.fence(ctx, fenceStore, "a", t1); !errors.Is(err, ErrFenced) {
			t.Errorf("fence(t1 after t2): got %v, want ErrFenced", err)
		}
		if _, err := s.apply(ctx, write{mode: writeFenced, req: Request{SKU: "a", Quantity: 1, RequestID: "r4"}, newStock: 6, fence: t1, column: fenceStore}); !errors.Is(err, ErrFenced) {
			t.Errorf("fenced write with stale token: got %v, want ErrFenced", err)
		}
		if _, err := s.apply(ctx, write{mode: writeFenced, req: Request{SKU: "a", Quantity: 1, RequestID: "r5"}, newStock: 6, fence: t2, column: fenceStore}); err != nil {
			t.Errorf("fenced write with current token: %v", err)
		}
		if err := s.fence(ctx, fenceStore, "nope", t2+100); !errors.Is(err, ErrNotFound) {
			t.Errorf("fence(unknown sku): got %v, want ErrNotFound", err)
		}
		a := audit(t, s, "a", 10)
		if a.Final != 6 || a.Reserved != 4 || a.Drift != 0 || a.FencedRejections != 2 {
			t.Errorf("audit after fencing: got %+v, want final 6, reserved 4, drift 0, 2 fenced rejections", a)
		}

		// Seeding starts a new run: ledger and rejections cleared, fence kept.
		seed(t, s, "a", 5)
		if a := audit(t, s, "a", 5); a.Final != 5 || a.Reservations != 0 || a.FencedRejections != 0 {
			t.Errorf("audit after re-seed: got %+v, want final 5, no reservations, no rejections", a)
		}
		if err := s.fence(ctx, fenceStore, "a", t2); !errors.Is(err, ErrFenced) {
			t.Errorf("fence(t2) after re-seed: got %v, want ErrFenced (last_fence must survive a seed)", err)
		}

		if _, err := s.Audit(ctx, []string{"a"}, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("Audit without initial: got %v, want ErrInvalid", err)
		}
		if _, err := s.Audit(ctx, []string{"nope"}, map[string]int64{"nope": 1}); !errors.Is(err, ErrNotFound) {
			t.Errorf("Audit(unknown): got %v, want ErrNotFound", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close: got %v, want nil (idempotent)", err)
		}
	})
}

// Several replicas starting at once must not trip over each other's
// migrations.
func TestConcurrentOpen(t *testing.T) {
	forEachStore(t, func(t *testing.T, dsn string) {
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := OpenStore(context.Background(), dsn)
				if err != nil {
					errs <- err
					return
				}
				errs <- s.Close()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("concurrent OpenStore: %v", err)
			}
		}
	})
}

func TestOpenStoreErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := OpenStore(ctx, "mysql://x"); err == nil {
		t.Error("OpenStore(mysql://x): got nil, want an error")
	}
	dir := t.TempDir()
	// A directory where the database file should be.
	if _, err := OpenStore(ctx, "sqlite:"+dir); err == nil {
		t.Errorf("OpenStore(sqlite:<a directory>): got nil, want an error")
	}
	if _, err := OpenStore(ctx, "postgres://redlab:wrong@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"); err == nil {
		t.Error("OpenStore(unreachable postgres): got nil, want an error")
	}
	// The SQLite directory is created.
	s, err := OpenStore(ctx, "sqlite:"+filepath.Join(dir, "sub", "dir", "inv.db"))
	if err != nil {
		t.Fatalf("OpenStore in a new directory: %v", err)
	}
	s.Close()
}

// TestEtcdFenceColumn: etcd revisions fence a row in a column of their own,
// never compared with the store's tokens; a seed zeroes it (a new etcd
// cluster counts from 1 again) and keeps last_fence; the rejections count
// in the one fenced_rejections the audit reports.
func TestEtcdFenceColumn(t *testing.T) {
	forEachStore(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		s := openStore(t, dsn)
		seed(t, s, "e", 10)
		// A high store token does not stop a low etcd revision.
		if err := s.fence(ctx, fenceStore, "e", 1000); err != nil {
			t.Fatalf("fence(last_fence, 1000): %v", err)
		}
		if err := s.fence(ctx, fenceEtcd, "e", 7); err != nil {
			t.Fatalf("fence(etcd_fence, 7) after last_fence 1000: got %v, want nil (separate columns)", err)
		}
		if err := s.fence(ctx, fenceEtcd, "e", 5); !errors.Is(err, ErrFenced) {
			t.Errorf("fence(etcd_fence, 5 after 7): got %v, want ErrFenced", err)
		}
		if _, err := s.apply(ctx, write{mode: writeFenced, req: Request{SKU: "e", Quantity: 1, RequestID: "e1"}, newStock: 9, fence: 5, column: fenceEtcd}); !errors.Is(err, ErrFenced) {
			t.Errorf("write carrying revision 5 on a row fenced by 7: got %v, want ErrFenced", err)
		}
		// The store's token 1000 is not what the etcd column carries.
		if _, err := s.apply(ctx, write{mode: writeFenced, req: Request{SKU: "e", Quantity: 1, RequestID: "e2"}, newStock: 9, fence: 1000, column: fenceEtcd}); !errors.Is(err, ErrFenced) {
			t.Errorf("write carrying 1000 on etcd_fence 7: got %v, want ErrFenced", err)
		}
		if _, err := s.apply(ctx, write{mode: writeFenced, req: Request{SKU: "e", Quantity: 1, RequestID: "e3"}, newStock: 9, fence: 7, column: fenceEtcd}); err != nil {
			t.Errorf("write carrying revision 7: %v", err)
		}
		a, err := s.Audit(ctx, []string{"e"}, map[string]int64{"e": 10})
		if err != nil {
			t.Fatal(err)
		}
		if a.FencedRejections != 3 || a.PerSKU["e"].Final != 9 || a.LostUpdates != 0 {
			t.Errorf("audit: got %d fenced rejections, final %d, %d lost; want 3, 9, 0", a.FencedRejections, a.PerSKU["e"].Final, a.LostUpdates)
		}
		seed(t, s, "e", 10)
		if err := s.fence(ctx, fenceEtcd, "e", 1); err != nil {
			t.Errorf("fence(etcd_fence, 1) after a seed: got %v, want nil (the seed zeroes etcd_fence)", err)
		}
		if err := s.fence(ctx, fenceStore, "e", 1000); !errors.Is(err, ErrFenced) {
			t.Errorf("fence(last_fence, 1000) after a seed: got %v, want ErrFenced (last_fence survives)", err)
		}
	})
}

// TestTransactionsNeedOneConnection: a transaction never waits for a second
// connection from the pool. With every connection busy in other
// transactions (a burst of reservations), one that did would wait for them
// while they wait for its write lock. The store gets a single connection:
// each write path must run on it, with the statement cache warm (as the
// store opens) and cold.
func TestTransactionsNeedOneConnection(t *testing.T) {
	forEachStore(t, func(t *testing.T, dsn string) {
		s := openStore(t, dsn)
		seed(t, s, "a", 100)
		s.db.SetMaxOpenConns(1)
		for _, cache := range []string{"warm", "cold"} {
			if cache == "cold" {
				s.stmts.Clear()
			}
			for i, w := range []write{
				{mode: writeBlind, newStock: 99},
				{mode: writeAtomic, req: Request{Quantity: 1}},
				{mode: writeVersioned, newStock: 97},
				{mode: writeNaive, newStock: 96, fence: 5, column: fenceStore},
				{mode: writeFenced, newStock: 95, fence: 5, column: fenceStore},
			} {
				// The deadline ends a wait that would otherwise last forever.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				w.req.SKU, w.req.RequestID = "a", fmt.Sprintf("%s-%d", cache, i)
				if w.req.Quantity == 0 {
					w.req.Quantity = 1
				}
				if w.mode == writeVersioned {
					_, v, err := s.stockVersion(ctx, "a")
					if err != nil {
						t.Fatal(err)
					}
					w.version = v
				}
				if _, err := s.apply(ctx, w); err != nil {
					t.Errorf("%s cache, mode %d: %v", cache, w.mode, err)
				}
				l, err := s.lockRow(ctx, "a", time.Second)
				if err != nil {
					t.Fatalf("%s cache: lockRow: %v", cache, err)
				}
				w.req.RequestID += "-locked"
				w.mode, w.newStock = writeBlind, l.stock-1
				if _, err := l.apply(ctx, w); err != nil {
					t.Errorf("%s cache: apply under the row lock: %v", cache, err)
				}
				cancel()
			}
		}
	})
}

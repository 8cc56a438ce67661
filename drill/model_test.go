package drill

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/drill/linear"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
)

// TestCheckersOnOneHistory feeds both checkers of the protected resource,
// the store's audit (the exact checker) and the model checker, the same
// history twice: two overlapping reservations of one unit, first as a
// lock that held (the second read what the first wrote), then as two
// holders that both read 10 and wrote 9 (a lost update). Each must see
// the lost update in the second history only, and they must agree.
func TestCheckersOnOneHistory(t *testing.T) {
	for _, tt := range []struct {
		name   string
		afters [2]int64 // the stock each reservation left
		lost   bool
	}{
		{"the lock held", [2]int64{9, 8}, false},
		{"a lost update", [2]int64{9, 9}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			kg, err := loadgen.NewKeyGen(loadgen.KeySpec{Kind: "uniform", N: 1}, loadgen.Shard{Count: 1})
			if err != nil {
				t.Fatal(err)
			}
			gr := &guardRun{guard: inventory.GuardRedlock, dir: dir, keys: kg, runID: "run"}
			sku := kg.Name(0)
			st, err := inventory.OpenStore(ctx, "sqlite:"+filepath.Join(dir, "inventory.db"))
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Seed(ctx, sku, 10); err != nil {
				t.Fatal(err)
			}
			st.Close()
			// The two holders' writes, as the store's write path leaves
			// them: the row's stock, and a ledger row each.
			db, err := sql.Open("sqlite", filepath.Join(dir, "inventory.db"))
			if err != nil {
				t.Fatal(err)
			}
			for i, after := range tt.afters {
				if _, err := db.ExecContext(ctx, `INSERT INTO reservations (request_id, sku, quantity, guard, holder, fence, created_at, stock_after)
					VALUES ($1, $2, 1, 'redlock', 'h', 0, $3, $4)`, loadgen.RequestID("run", uint64(i)), sku, time.Now().UTC(), after); err != nil {
					t.Fatal(err)
				}
				if _, err := db.ExecContext(ctx, `UPDATE inventory SET stock = $1 WHERE sku = $2`, after, sku); err != nil {
					t.Fatal(err)
				}
			}
			db.Close()

			// The exact checker: initial − final = Σ ledger?
			store, err := guardStore(ctx, gr, 10)
			if err != nil {
				t.Fatal(err)
			}
			audit := store.Initial[sku] - store.Final[sku] - 2
			if (audit != 0) != tt.lost {
				t.Errorf("audit drift %d: want lost %v", audit, tt.lost)
			}
			// The model checker, on the operations as the history has them.
			ops := []linear.Op{
				linearOp(OpRecord{RequestID: loadgen.RequestID("run", 0), Key: sku, Quantity: 1, SentNs: 100, EndedNs: 500, Outcome: "reserved"}),
				linearOp(OpRecord{RequestID: loadgen.RequestID("run", 1), Key: sku, Quantity: 1, SentNs: 200, EndedNs: 600, Outcome: "reserved"}),
			}
			v := linear.Check(ops, store, time.Minute)
			if v.Linearizable == tt.lost {
				t.Errorf("model checker: %s; want lost %v", v, tt.lost)
			}
			if (audit != 0) == v.Linearizable {
				t.Errorf("the checkers disagree: audit drift %d, model %s", audit, v)
			}
		})
	}
}

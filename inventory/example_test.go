package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/redlocklab/redlocklab/inventory"
)

// A reservation through the db-atomic guard (no lock service needed), a
// replay of the same request ID, a refusal, and the audit that proves stock
// was conserved.
func Example() {
	dir, err := os.MkdirTemp("", "inventory-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	store, err := inventory.OpenStore(ctx, "sqlite:"+filepath.Join(dir, "inventory.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Seed(ctx, "widget", 10); err != nil {
		log.Fatal(err)
	}
	svc, err := inventory.NewService(store, inventory.GuardDBAtomic, nil, inventory.WithHolder("example"))
	if err != nil {
		log.Fatal(err)
	}

	req := inventory.Request{SKU: "widget", Quantity: 3, RequestID: "order-1"}
	r, err := svc.Reserve(ctx, req)
	fmt.Println(r.SKU, r.Quantity, r.Replayed, err)
	again, err := svc.Reserve(ctx, req)
	fmt.Println("same ID again:", again.ID == r.ID, again.Replayed, err)
	_, err = svc.Reserve(ctx, inventory.Request{SKU: "widget", Quantity: 8, RequestID: "order-2"})
	fmt.Println("8 more:", errors.Is(err, inventory.ErrOutOfStock))

	a, err := store.Audit(ctx, []string{"widget"}, map[string]int64{"widget": 10})
	if err != nil {
		log.Fatal(err)
	}
	w := a.PerSKU["widget"]
	fmt.Printf("initial %d, final %d, ledger %d, lost %d\n", w.Initial, w.Final, w.Reserved, a.LostUpdates)
	// Output:
	// widget 3 false <nil>
	// same ID again: true true <nil>
	// 8 more: true
	// initial 10, final 7, ledger 3, lost 0
}

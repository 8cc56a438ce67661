package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

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

// The HTTP API through its client: the answers come back as the package's
// values and errors, and a request that never arrived says so.
func ExampleClient() {
	dir, err := os.MkdirTemp("", "inventory-client-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	replica, err := inventory.OpenReplica(ctx, inventory.ReplicaConfig{
		StoreDSN: "sqlite:" + filepath.Join(dir, "inventory.db"), Guard: inventory.GuardDBAtomic, Holder: "example",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer replica.Close()
	h, err := inventory.NewHandler(replica.Service(), nil)
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)

	tr := &http.Transport{}
	c, err := inventory.NewClient(srv.URL, &http.Client{Transport: tr, Timeout: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.SetStock(ctx, "widget", 2); err != nil {
		log.Fatal(err)
	}
	r, err := c.Reserve(ctx, inventory.Request{SKU: "widget", Quantity: 2, RequestID: "order-1"})
	fmt.Println(r.Quantity, r.Holder, err)
	_, err = c.Reserve(ctx, inventory.Request{SKU: "widget", Quantity: 1, RequestID: "order-2"})
	fmt.Println("out of stock:", errors.Is(err, inventory.ErrOutOfStock))

	// The server goes away. (Without closing the kept-alive connection, the
	// request could go out on it before the client saw it close: sent, never
	// answered, ErrOutcomeUnknown.)
	srv.Close()
	tr.CloseIdleConnections()
	_, err = c.Reserve(ctx, inventory.Request{SKU: "widget", Quantity: 1, RequestID: "order-3"})
	fmt.Println("not sent:", errors.Is(err, inventory.ErrNotSent))
	// Output:
	// 2 example <nil>
	// out of stock: true
	// not sent: true
}

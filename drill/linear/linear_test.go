package linear

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two reservations of one unit each on sku-a, overlapping in time, both
// answered taken; the store's final stock decides.
func overlapping() []Op {
	return []Op{
		{RequestID: "r-0", Key: "sku-a", Quantity: 1, SentNs: 100, EndedNs: 500, Reserved: true},
		{RequestID: "r-1", Key: "sku-a", Quantity: 1, SentNs: 200, EndedNs: 600, Reserved: true},
		{RequestID: "r-2", Key: "sku-b", Quantity: 2, SentNs: 700, EndedNs: 900, Reserved: true},
	}
}

func TestLostUpdate(t *testing.T) {
	initial := map[string]int64{"sku-a": 10, "sku-b": 10}
	// Both holders read 10 and wrote 9: one unit sold twice.
	lost := Check(overlapping(), Store{Initial: initial, Final: map[string]int64{"sku-a": 9, "sku-b": 8},
		Committed: map[string]int64{"r-0": 9, "r-1": 9, "r-2": 8}}, 0)
	if lost.Linearizable || len(lost.Bad) != 1 || lost.Bad[0] != "sku-a" {
		t.Errorf("a lost update: got %s, want sku-a not linearizable", lost)
	}
	kept := Check(overlapping(), Store{Initial: initial, Final: map[string]int64{"sku-a": 8, "sku-b": 8},
		Committed: map[string]int64{"r-0": 9, "r-1": 8, "r-2": 8}}, 0)
	if !kept.Linearizable || kept.Ops != 5 {
		t.Errorf("no lost update: got %s (%d operations), want linearizable over 5", kept, kept.Ops)
	}
	// Overlapping, the two writes may have run in either order.
	swapped := Check(overlapping(), Store{Initial: initial, Final: map[string]int64{"sku-a": 8, "sku-b": 8},
		Committed: map[string]int64{"r-0": 8, "r-1": 9, "r-2": 8}}, 0)
	if !swapped.Linearizable {
		t.Errorf("overlapping writes in either order: got %s, want linearizable", swapped)
	}
	apart := []Op{
		{RequestID: "r-0", Key: "sku-a", Quantity: 1, SentNs: 100, EndedNs: 200, Reserved: true},
		{RequestID: "r-1", Key: "sku-a", Quantity: 1, SentNs: 300, EndedNs: 400, Reserved: true},
	}
	reordered := Check(apart, Store{Initial: initial, Final: map[string]int64{"sku-a": 8},
		Committed: map[string]int64{"r-0": 8, "r-1": 9}}, 0)
	if reordered.Linearizable {
		t.Errorf("a later reservation that left more stock than an earlier one: got %s, want not linearizable", reordered)
	}
}

// TestLedgerSettles: a reservation whose answer was lost counts when the
// ledger has it, and not when it does not.
func TestLedgerSettles(t *testing.T) {
	ops := []Op{
		{RequestID: "r-0", Key: "sku-a", Quantity: 1, SentNs: 100, EndedNs: 500, Reserved: true},
		{RequestID: "r-1", Key: "sku-a", Quantity: 3, SentNs: 200, EndedNs: 300}, // timed out
		{RequestID: "r-2", Key: "sku-a", Quantity: 1, SentNs: -1, EndedNs: -1},   // never sent
	}
	initial := map[string]int64{"sku-a": 10}
	in := Check(ops, Store{Initial: initial, Final: map[string]int64{"sku-a": 6}, Committed: map[string]int64{"r-0": 9, "r-1": 6}}, 0)
	if !in.Linearizable || in.Settled != 1 {
		t.Errorf("committed without an answer: got %s, settled %d; want linearizable, 1 settled", in, in.Settled)
	}
	out := Check(ops, Store{Initial: initial, Final: map[string]int64{"sku-a": 9}, Committed: map[string]int64{"r-0": 9}}, 0)
	if !out.Linearizable || out.Settled != 0 {
		t.Errorf("failed and not committed: got %s, settled %d; want linearizable, none settled", out, out.Settled)
	}
	// The store lost the timed-out reservation's units anyway: wrong.
	bad := Check(ops, Store{Initial: initial, Final: map[string]int64{"sku-a": 6}, Committed: map[string]int64{"r-0": 9}}, 0)
	if bad.Linearizable {
		t.Errorf("units gone without a ledger row: got %s, want not linearizable", bad)
	}
}

// TestOutOfStockOrder: an out-of-stock answer is legal only when the stock
// was short at some point of its interval.
func TestOutOfStockOrder(t *testing.T) {
	initial := map[string]int64{"sku-a": 1}
	ok := Check([]Op{
		{RequestID: "r-0", Key: "sku-a", Quantity: 1, SentNs: 100, EndedNs: 200, Reserved: true},
		{RequestID: "r-1", Key: "sku-a", Quantity: 1, SentNs: 300, EndedNs: 400, OutOfStock: true},
	}, Store{Initial: initial, Final: map[string]int64{"sku-a": 0}, Committed: map[string]int64{"r-0": 0}}, 0)
	if !ok.Linearizable {
		t.Errorf("out of stock after the last unit went: got %s", ok)
	}
	early := Check([]Op{
		{RequestID: "r-1", Key: "sku-a", Quantity: 1, SentNs: 100, EndedNs: 200, OutOfStock: true},
		{RequestID: "r-0", Key: "sku-a", Quantity: 1, SentNs: 300, EndedNs: 400, Reserved: true},
	}, Store{Initial: initial, Final: map[string]int64{"sku-a": 0}, Committed: map[string]int64{"r-0": 0}}, 0)
	if early.Linearizable {
		t.Errorf("out of stock while a unit was left: got %s, want not linearizable", early)
	}
}

func TestVisualize(t *testing.T) {
	v := Check(overlapping(), Store{Initial: map[string]int64{"sku-a": 10, "sku-b": 10},
		Final: map[string]int64{"sku-a": 9, "sku-b": 8}, Committed: map[string]int64{"r-0": 9, "r-1": 9, "r-2": 8}}, time.Minute)
	path := filepath.Join(t.TempDir(), "history.html")
	if err := v.Visualize(path, []Fault{{StartNs: 150, EndNs: 650, Desc: "partition nodes 1,2"}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"partition nodes 1,2", "reserve 1", "sku-a"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("history.html lacks %q", want)
		}
	}
}

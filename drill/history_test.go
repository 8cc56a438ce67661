package drill

import (
	"bytes"
	"github.com/redlocklab/redlocklab/infra/fault"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/inventory"
)

func TestCheckHolds(t *testing.T) {
	hold := func(key, token string, g, v, r int64) HoldRecord {
		return HoldRecord{Type: "hold", Guard: "redlock", Key: key, Token: token, GrantedNs: g, ValidUntilNs: v, ReleasedNs: r}
	}
	tests := []struct {
		name   string
		holds  []HoldRecord
		dg, lv int64
	}{
		{"disjoint", []HoldRecord{hold("k", "a", 0, 10, 5), hold("k", "b", 5, 20, 9)}, 0, 0},
		// The first holder outlived its validity (a pause): the resource
		// sees two holders, the lock did not fail.
		{"holder outlived its lock", []HoldRecord{hold("k", "a", 0, 8, 10), hold("k", "b", 9, 25, 20)}, 1, 0},
		// Both inside their validity: the lock itself failed.
		{"lock violation", []HoldRecord{hold("k", "a", 0, 10, 10), hold("k", "b", 5, 20, 12)}, 1, 1},
		{"same token is one holder", []HoldRecord{hold("k", "a", 0, 10, 10), hold("k", "a", 5, 20, 12)}, 0, 0},
		{"other keys do not overlap", []HoldRecord{hold("k", "a", 0, 10, 10), hold("j", "b", 5, 20, 12)}, 0, 0},
		{"three at once", []HoldRecord{hold("k", "a", 0, 30, 30), hold("k", "b", 5, 30, 30), hold("k", "c", 6, 30, 30)}, 3, 3},
		{"other guard ignored", []HoldRecord{hold("k", "a", 0, 10, 10), {Guard: "redis-single", Key: "k", Token: "b", GrantedNs: 5, ValidUntilNs: 20, ReleasedNs: 12}}, 0, 0},
	}
	for _, tt := range tests {
		c := checkHolds(tt.holds, "redlock")
		if dg, lv := c.DoubleGrants(), c.LockViolations(); dg != tt.dg || lv != tt.lv {
			t.Errorf("%s: got %d double grants, %d lock violations; want %d, %d", tt.name, dg, lv, tt.dg, tt.lv)
		}
	}
}

func TestHistoryRoundTrip(t *testing.T) {
	t0 := time.Now()
	h := NewHistory(t0)
	h.AddHold(inventory.GuardRedlock, inventory.Hold{Key: "lock:sku:x", Holder: "replica-0", Token: "tok1",
		Granted: t0.Add(time.Second), ValidUntil: t0.Add(9 * time.Second), Released: t0.Add(3 * time.Second)})
	h.AddFault("f1", fault.PowerLoss, []int{3}, "", "start", t0.Add(2*time.Second))
	h.AddFault("f1", fault.PowerLoss, []int{3}, "", "end", t0.Add(4*time.Second))
	h.AddHold(inventory.GuardRedlock, inventory.Hold{Key: "lock:sku:x", Holder: "replica-1", Token: "tok2",
		Granted: t0.Add(2500 * time.Millisecond), Released: t0.Add(5 * time.Second)})
	path := filepath.Join(t.TempDir(), HistoryFile)
	if err := h.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	holds, faults, err := ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(holds) != 2 || len(faults) != 2 {
		t.Fatalf("got %d holds, %d faults; want 2, 2", len(holds), len(faults))
	}
	if holds[0].GrantedNs != int64(time.Second) || holds[0].ValidUntilNs != int64(9*time.Second) || holds[0].ReleasedNs != int64(3*time.Second) {
		t.Errorf("hold 0: got %+v", holds[0])
	}
	// Read back, the record is the hold that was written.
	first := inventory.Hold{Key: "lock:sku:x", Holder: "replica-0", Token: "tok1",
		Granted: t0.Add(time.Second), ValidUntil: t0.Add(9 * time.Second), Released: t0.Add(3 * time.Second)}
	got := holds[0].Hold(func(ns int64) time.Time { return t0.Add(time.Duration(ns)) })
	if got.Key != first.Key || got.Holder != first.Holder || got.Token != first.Token ||
		!got.Granted.Equal(first.Granted) || !got.ValidUntil.Equal(first.ValidUntil) || !got.Released.Equal(first.Released) {
		t.Errorf("hold 0 read back: got %+v, want %+v", got, first)
	}
	// Unknown validity: valid until released.
	if holds[1].ValidUntilNs != holds[1].ReleasedNs {
		t.Errorf("hold 1: valid until %d, want its release %d", holds[1].ValidUntilNs, holds[1].ReleasedNs)
	}
	if faults[0].Event != "start" || faults[0].Nodes[0] != 3 || faults[1].AtNs != int64(4*time.Second) {
		t.Errorf("faults: got %+v", faults)
	}
	if c := checkHolds(holds, ""); c.DoubleGrants() != 1 || c.LockViolations() != 1 {
		dg, lv := c.DoubleGrants(), c.LockViolations()
		t.Errorf("got %d double grants, %d lock violations; want 1, 1", dg, lv)
	}
}

// TestEventStream: what a serve process writes (EventWriter) reads back as
// the history's records, on CLOCK_MONOTONIC, in order.
func TestEventStream(t *testing.T) {
	var buf bytes.Buffer
	w := NewEventWriter(&buf, inventory.GuardRedlock, "proc-0")
	granted := time.Now()
	w.Hold(inventory.Hold{Key: "lock:sku:a", Holder: "proc-0", Token: "t1", Granted: granted,
		ValidUntil: granted.Add(10 * time.Second), Released: granted.Add(15 * time.Second)})
	w.ProcessPause(inventory.ProcessPause{At: granted.Add(time.Millisecond), For: 15 * time.Second})
	w.Hold(inventory.Hold{Key: "lock:sku:b", Holder: "proc-0", Token: "t2", Granted: granted, Released: granted.Add(time.Second)})
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	var holds []HoldRecord
	var faults []FaultRecord
	err := scanRecords(&buf, "events", func(h *HoldRecord, f *FaultRecord, _ *OpRecord) {
		if h != nil {
			holds = append(holds, *h)
		} else {
			faults = append(faults, *f)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(holds) != 2 || len(faults) != 1 {
		t.Fatalf("got %d holds and %d faults, want 2 and 1", len(holds), len(faults))
	}
	h := holds[0]
	if h.Guard != "redlock" || h.Key != "lock:sku:a" || h.Token != "t1" || h.Holder != "proc-0" {
		t.Errorf("hold: got %+v", h)
	}
	if !(h.GrantedNs < h.ValidUntilNs && h.ValidUntilNs < h.ReleasedNs) {
		t.Errorf("hold: got granted %d, valid until %d, released %d: want them in that order", h.GrantedNs, h.ValidUntilNs, h.ReleasedNs)
	}
	if now := monotonicNs(); h.GrantedNs > now {
		t.Errorf("hold granted at %d on CLOCK_MONOTONIC, after now (%d)", h.GrantedNs, now)
	}
	if holds[1].ValidUntilNs != holds[1].ReleasedNs {
		t.Errorf("a hold without validity: got valid until %d, want its release %d", holds[1].ValidUntilNs, holds[1].ReleasedNs)
	}
	f := faults[0]
	if f.Fault != "client-pause" || f.Scope != "process" || f.Event != "start" || f.Guard != "redlock" || f.ID != "client-pause-redlock-proc-0-1" ||
		!(h.GrantedNs < f.AtNs && f.AtNs < h.ValidUntilNs) {
		t.Errorf("pause: got %+v", f)
	}
}

// TestTwentyHoldersInTheHistory: twenty holders of one key whose tenures
// all overlap, recorded, written to history.jsonl and read back, are 190
// double grants (20·19/2) and 190 lock violations while all are valid: the
// count `redlab load` reports for the same holds (loadgen's
// TestHoldCheckerTwentyAtOnce).
func TestTwentyHoldersInTheHistory(t *testing.T) {
	t0 := time.Now()
	h := NewHistory(t0)
	for i := range 20 {
		g := t0.Add(time.Duration(i) * time.Millisecond)
		h.AddHold(inventory.GuardRedlock, inventory.Hold{Key: "lock:sku:hot", Holder: "replica-" + strconv.Itoa(i), Token: "t" + strconv.Itoa(i),
			Granted: g, Released: g.Add(100 * time.Millisecond), ValidUntil: g.Add(time.Second)})
	}
	h.AddHold(inventory.GuardRedisSingle, inventory.Hold{Key: "lock:sku:hot", Holder: "other", Token: "o", Granted: t0, Released: t0.Add(time.Second)})
	path := filepath.Join(t.TempDir(), HistoryFile)
	if err := h.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	holds, _, err := ReadHistory(f)
	if err != nil {
		t.Fatal(err)
	}
	c := checkHolds(holds, string(inventory.GuardRedlock))
	if dg, lv := c.DoubleGrants(), c.LockViolations(); dg != 190 || lv != 190 {
		t.Errorf("got %d double grants, %d lock violations; want 190, 190", dg, lv)
	}
}

package loadgen

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/inventory"
)

func TestHoldChecker(t *testing.T) {
	base := time.Unix(1000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	hold := func(key, holder, token string, g, r int) inventory.Hold {
		return inventory.Hold{Key: key, Holder: holder, Token: token, Granted: at(g), Released: at(r)}
	}
	for _, tc := range []struct {
		name  string
		holds []inventory.Hold
		want  int64
	}{
		{"back to back", []inventory.Hold{hold("k", "a", "1", 0, 10), hold("k", "b", "2", 10, 20), hold("k", "a", "3", 20, 30)}, 0},
		{"overlap", []inventory.Hold{hold("k", "a", "1", 0, 10), hold("k", "b", "2", 5, 15)}, 1},
		{"reported out of order", []inventory.Hold{hold("k", "b", "2", 5, 15), hold("k", "a", "1", 0, 10)}, 1},
		{"later hold reported first is no overlap", []inventory.Hold{hold("k", "b", "2", 20, 30), hold("k", "a", "1", 0, 10)}, 0},
		{"other keys do not interact", []inventory.Hold{hold("k1", "a", "1", 0, 10), hold("k2", "b", "2", 5, 15)}, 0},
		{"one long hold over two short ones", []inventory.Hold{hold("k", "a", "1", 0, 100), hold("k", "b", "2", 10, 20), hold("k", "c", "3", 30, 40)}, 2},
		{"three at once", []inventory.Hold{hold("k", "a", "1", 0, 30), hold("k", "b", "2", 10, 40), hold("k", "c", "3", 20, 50)}, 3},
		{"zero release counts as an instant", []inventory.Hold{hold("k", "a", "1", 0, 10), {Key: "k", Token: "2", Granted: at(5)}}, 1},
		{"same token twice is not a double grant", []inventory.Hold{hold("k", "a", "1", 0, 10), hold("k", "a", "1", 0, 10)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewHoldChecker(base)
			for _, h := range tc.holds {
				c.Observe(h)
			}
			c.Flush()
			if got := c.DoubleGrants(); got != tc.want {
				t.Errorf("double grants: got %d, want %d", got, tc.want)
			}
			if ex := c.Examples(); int64(len(ex)) != tc.want {
				t.Errorf("examples: got %d, want %d", len(ex), tc.want)
			}
		})
	}
	c := NewHoldChecker(base)
	c.Observe(hold("lock:sku:x", "replica-0", "t1", 100, 300))
	c.Observe(hold("lock:sku:x", "replica-1", "t2", 200, 400))
	c.Flush()
	ex := c.Examples()
	if len(ex) != 1 || ex[0].First.Holder != "replica-0" || ex[0].Second.GrantedMs != 200 || ex[0].First.ReleasedMs != 300 {
		t.Errorf("example = %+v", ex)
	}
}

// TestHoldCheckerLockViolations: a double grant is a lock violation only when
// the overlap falls inside both holders' validity.
func TestHoldCheckerLockViolations(t *testing.T) {
	base := time.Unix(1000, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	hold := func(token string, g, v, r int) inventory.Hold {
		h := inventory.Hold{Key: "k", Holder: token, Token: token, Granted: at(g), Released: at(r)}
		if v >= 0 {
			h.ValidUntil = at(v)
		}
		return h
	}
	for _, tc := range []struct {
		name   string
		holds  []inventory.Hold
		dg, lv int64
	}{
		{"holder outlived its validity", []inventory.Hold{hold("1", 0, 8, 10), hold("2", 9, 30, 20)}, 1, 0},
		{"both valid", []inventory.Hold{hold("1", 0, 10, 10), hold("2", 5, 30, 20)}, 1, 1},
		{"no validity known: valid until released", []inventory.Hold{hold("1", 0, -1, 10), hold("2", 5, -1, 20)}, 1, 1},
		{"validity ends exactly at the second grant", []inventory.Hold{hold("1", 0, 5, 10), hold("2", 5, 30, 20)}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewHoldChecker(base)
			for _, h := range tc.holds {
				c.Observe(h)
			}
			c.Flush()
			if dg, lv := c.DoubleGrants(), c.LockViolations(); dg != tc.dg || lv != tc.lv {
				t.Errorf("got %d double grants, %d lock violations; want %d, %d", dg, lv, tc.dg, tc.lv)
			}
		})
	}
}

func TestHoldCheckerConcurrentAndBounded(t *testing.T) {
	base := time.Now()
	c := NewHoldChecker(base)
	var next atomic.Int64
	var wg sync.WaitGroup
	// Eight reporters, as concurrent replicas would be: hold i belongs to
	// slot i (a disjoint 5ms interval every 10ms), reported roughly in order.
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= 8000 {
					return
				}
				g := base.Add(time.Duration(i) * 10 * time.Millisecond)
				c.Observe(inventory.Hold{Key: "k", Holder: "w", Token: strconv.FormatInt(i, 10), Granted: g, Released: g.Add(5 * time.Millisecond)})
			}
		}()
	}
	wg.Wait()
	c.mu.Lock()
	pending := len(c.pending)
	c.mu.Unlock()
	// Holds wait only reorderWindow (5s of hold time: 500 slots) before they
	// are checked: memory does not grow with the run.
	if pending > 600 {
		t.Errorf("%d holds still pending, want those of the reorder window only", pending)
	}
	c.Flush()
	if c.DoubleGrants() != 0 {
		t.Errorf("disjoint holds: got %d double grants", c.DoubleGrants())
	}
	// A hold reported far too late, in a free slot, matches nothing.
	c.Observe(inventory.Hold{Key: "k", Token: "late", Granted: base.Add(6 * time.Millisecond), Released: base.Add(9 * time.Millisecond)})
	c.Flush()
	if c.DoubleGrants() != 0 {
		t.Errorf("a very late hold in a free slot: got %d double grants", c.DoubleGrants())
	}
}

package loadgen

import (
	"context"
	"math/rand/v2"
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
		{"one long hold over twelve short ones: every pair counts", append([]inventory.Hold{hold("k", "a", "long", 0, 1000)}, shortHolds(12)...), 12},
		{"same token twice is not a double grant", []inventory.Hold{hold("k", "a", "1", 0, 10), hold("k", "a", "1", 0, 10)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewHoldChecker(base)
			for _, h := range tc.holds {
				c.Observe(h)
			}
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
			if dg, lv := c.DoubleGrants(), c.LockViolations(); dg != tc.dg || lv != tc.lv {
				t.Errorf("got %d double grants, %d lock violations; want %d, %d", dg, lv, tc.dg, tc.lv)
			}
		})
	}
}

// shortHolds are n disjoint 5ms holds of key k by holder b, one every 10ms
// from 10ms on.
func shortHolds(n int) []inventory.Hold {
	base := time.Unix(1000, 0)
	out := make([]inventory.Hold, n)
	for i := range out {
		g := base.Add(time.Duration(10+10*i) * time.Millisecond)
		out[i] = inventory.Hold{Key: "k", Holder: "b", Token: "s" + strconv.Itoa(i), Granted: g, Released: g.Add(5 * time.Millisecond)}
	}
	return out
}

// TestHoldCheckerTwentyAtOnce: twenty holders of one key whose tenures all
// overlap are 190 double grants (20·19/2), however many overlap one hold,
// and 190 lock violations while they are all valid; through the target, as
// a load run's Safety reports them.
func TestHoldCheckerTwentyAtOnce(t *testing.T) {
	base := time.Unix(1000, 0)
	target := &InventoryTarget{cfg: InventoryConfig{ReplicaConfig: inventory.ReplicaConfig{Guard: inventory.GuardRedlock}}}
	target.Begin(base)
	for _, h := range twentyAtOnce(base) {
		target.observeHold(h)
	}
	s, err := target.Safety(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !s.DoubleGrantsChecked || s.DoubleGrants != 190 || s.LockViolations != 190 || len(s.Examples) != maxExamples {
		t.Errorf("safety = %d double grants, %d lock violations, %d examples (checked %v); want 190, 190, %d",
			s.DoubleGrants, s.LockViolations, len(s.Examples), s.DoubleGrantsChecked, maxExamples)
	}
}

// twentyAtOnce are twenty holds of one key, holder i granted at i ms and
// released at 100+i ms, valid throughout, reported in release order.
func twentyAtOnce(base time.Time) []inventory.Hold {
	out := make([]inventory.Hold, 20)
	for i := range out {
		g := base.Add(time.Duration(i) * time.Millisecond)
		out[i] = inventory.Hold{Key: "lock:sku:hot", Holder: "replica-" + strconv.Itoa(i), Token: "t" + strconv.Itoa(i),
			Granted: g, Released: g.Add(100 * time.Millisecond), ValidUntil: g.Add(time.Second)}
	}
	return out
}

// TestHoldCheckerExact: on random holds reported in random order, from
// several goroutines, the checker finds exactly the pairs a comparison of
// every two holds finds.
func TestHoldCheckerExact(t *testing.T) {
	base := time.Unix(1000, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	holds := make([]inventory.Hold, 3000)
	for i := range holds {
		g := base.Add(time.Duration(rng.IntN(20_000)) * time.Millisecond)
		d := time.Duration(1+rng.IntN(40)) * time.Millisecond
		if rng.IntN(100) == 0 {
			d = time.Duration(rng.IntN(5000)) * time.Millisecond // a paused holder
		}
		h := inventory.Hold{Key: "k" + strconv.Itoa(rng.IntN(4)), Holder: "h", Token: strconv.Itoa(rng.IntN(2500)), Granted: g, Released: g.Add(d)}
		if rng.IntN(3) > 0 {
			h.ValidUntil = g.Add(time.Duration(rng.IntN(60)) * time.Millisecond)
		}
		holds[i] = h
	}
	var wantDG, wantLV int64
	for i, a := range holds {
		for _, b := range holds[i+1:] {
			if a.Key != b.Key || a.Token == b.Token || !a.Granted.Before(b.Released) || !b.Granted.Before(a.Released) {
				continue
			}
			wantDG++
			if a.Granted.Before(validEnd(b)) && b.Granted.Before(validEnd(a)) {
				wantLV++
			}
		}
	}
	if wantDG == 0 || wantLV == 0 || wantLV == wantDG {
		t.Fatalf("the random holds make %d double grants, %d lock violations: want some of each kind", wantDG, wantLV)
	}
	rng.Shuffle(len(holds), func(i, j int) { holds[i], holds[j] = holds[j], holds[i] })
	c := NewHoldChecker(base)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(holds)); i = next.Add(1) - 1 {
				c.Observe(holds[i])
			}
		})
	}
	wg.Wait()
	if dg, lv := c.DoubleGrants(), c.LockViolations(); dg != wantDG || lv != wantLV {
		t.Errorf("got %d double grants, %d lock violations; want %d, %d", dg, lv, wantDG, wantLV)
	}
}

// validEnd is when h stopped being a valid lock, as the architecture
// defines it: its release, or its validity's end when that came first.
func validEnd(h inventory.Hold) time.Time {
	if h.ValidUntil.IsZero() || h.Released.Before(h.ValidUntil) {
		return h.Released
	}
	return h.ValidUntil
}

package redlock

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	// fill admits attempts until the limit turns one away and returns how
	// many it admitted.
	fill := func(l *limiter) int {
		n := 0
		for {
			ok, lim := l.acquire()
			if !ok {
				if n != lim {
					t.Fatalf("turned away at %d in flight with limit %d", n, lim)
				}
				return n
			}
			n++
		}
	}
	drain := func(l *limiter, n int, start time.Time, sig signal, at time.Time) {
		for range n {
			l.release(start, sig, at)
		}
	}

	t.Run("starts at the initial limit and turns the next attempt away", func(t *testing.T) {
		l := newLimiter()
		if got := fill(l); got != initialLimit {
			t.Errorf("got %d admitted, want %d", got, initialLimit)
		}
	})

	t.Run("congestion halves the limit once per round trip", func(t *testing.T) {
		l := newLimiter()
		n := fill(l)
		// Every attempt admitted before the cut reports congestion: one cut.
		drain(l, n, t0, signalCongested, t0.Add(time.Millisecond))
		if got, want := l.current(), initialLimit/2; got != want {
			t.Fatalf("after one congested round trip: got limit %d, want %d", got, want)
		}
		// An attempt admitted after the cut cuts again.
		n = fill(l)
		drain(l, n, t0.Add(2*time.Millisecond), signalCongested, t0.Add(3*time.Millisecond))
		if got, want := l.current(), initialLimit/4; got != want {
			t.Fatalf("after a second one: got limit %d, want %d", got, want)
		}
	})

	t.Run("never below the minimum", func(t *testing.T) {
		l := newLimiter()
		at := t0
		for range 20 {
			l.acquire()
			at = at.Add(time.Millisecond)
			l.release(at, signalCongested, at.Add(time.Microsecond))
		}
		if got := l.current(); got != minLimit {
			t.Errorf("got limit %d, want the minimum %d", got, minLimit)
		}
		if ok, _ := l.acquire(); !ok {
			t.Error("at the minimum: got the only attempt turned away, want it admitted")
		}
	})

	t.Run("regrows slowly right after a cut, fast once it has passed", func(t *testing.T) {
		l := newLimiter()
		l.acquire()
		l.release(t0, signalCongested, t0) // 16
		l.acquire()
		l.release(t0.Add(time.Millisecond), signalCongested, t0.Add(time.Millisecond)) // 8
		// Right after the cut: one per limit's worth of successes, and
		// only while the limit is used.
		n := fill(l)
		drain(l, n, t0.Add(2*time.Millisecond), signalOK, t0.Add(3*time.Millisecond))
		if got := l.current(); got != 8 && got != 9 {
			t.Fatalf("8 successes right after the cut: got limit %d, want 8 or 9", got)
		}
		// Much later: back to the initial limit by one per success.
		later := t0.Add(regrowAfter + time.Second)
		for range initialLimit {
			l.acquire()
			l.release(later, signalOK, later)
		}
		if got := l.current(); got != initialLimit {
			t.Errorf("after the overload passed: got limit %d, want %d", got, initialLimit)
		}
	})

	t.Run("an idle client does not grow its limit", func(t *testing.T) {
		l := newLimiter()
		for range 1000 {
			l.acquire()
			l.release(t0, signalOK, t0.Add(time.Hour))
		}
		if got := l.current(); got != initialLimit {
			t.Errorf("after 1000 lone successes: got limit %d, want %d", got, initialLimit)
		}
	})

	t.Run("signals that say nothing change nothing", func(t *testing.T) {
		l := newLimiter()
		n := fill(l)
		drain(l, n, t0, signalNone, t0)
		if got := l.current(); got != initialLimit {
			t.Errorf("got limit %d, want %d", got, initialLimit)
		}
	})
}

func TestRetryBudget(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ratio   float64
		burst   int
		firsts  int
		retries int // attempted after the firsts
		want    int // granted
	}{
		{"a fresh budget holds the burst", 0.2, 10, 0, 50, 10},
		{"first attempts refill it by the ratio", 0.2, 10, 100, 100, 10},
		{"never more than the burst", 0.5, 4, 1000, 100, 4},
		{"a tenth", 0.1, 1, 0, 10, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newRetryBudget(tc.ratio, tc.burst)
			for range tc.firsts {
				b.deposit()
			}
			got := 0
			for range tc.retries {
				if b.withdraw() {
					got++
				}
			}
			if got != tc.want {
				t.Errorf("got %d retries granted, want %d", got, tc.want)
			}
		})
	}

	t.Run("retries never exceed the burst plus the ratio of first attempts", func(t *testing.T) {
		const ratio, burst = 0.2, 10
		b := newRetryBudget(ratio, burst)
		firsts, retries := 0, 0
		for i := range 10_000 {
			b.deposit()
			firsts++
			// Every call fails and tries to retry up to three times.
			for range i % 4 {
				if b.withdraw() {
					retries++
				}
			}
			if float64(retries) > burst+ratio*float64(firsts) {
				t.Fatalf("after %d first attempts: got %d retries, want at most %.1f", firsts, retries, burst+ratio*float64(firsts))
			}
		}
	})
}

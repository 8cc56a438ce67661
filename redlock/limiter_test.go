package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestLimiter(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	// fill admits attempts until the limit turns one away and returns how
	// many it admitted.
	fill := func(l *limiter) int {
		n := 0
		for {
			ok, lim := l.tryAcquire()
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
		l := newLimiter(initialLimit, false)
		if got := fill(l); got != initialLimit {
			t.Errorf("got %d admitted, want %d", got, initialLimit)
		}
	})

	t.Run("congestion halves the limit once per round trip", func(t *testing.T) {
		l := newLimiter(initialLimit, false)
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
		l := newLimiter(initialLimit, false)
		at := t0
		for range 20 {
			l.tryAcquire()
			at = at.Add(time.Millisecond)
			l.release(at, signalCongested, at.Add(time.Microsecond))
		}
		if got := l.current(); got != minLimit {
			t.Errorf("got limit %d, want the minimum %d", got, minLimit)
		}
		if ok, _ := l.tryAcquire(); !ok {
			t.Error("at the minimum: got the only attempt turned away, want it admitted")
		}
	})

	t.Run("regrows slowly right after a cut, fast once it has passed", func(t *testing.T) {
		l := newLimiter(initialLimit, false)
		l.tryAcquire()
		l.release(t0, signalCongested, t0) // 16
		l.tryAcquire()
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
			l.tryAcquire()
			l.release(later, signalOK, later)
		}
		if got := l.current(); got != initialLimit {
			t.Errorf("after the overload passed: got limit %d, want %d", got, initialLimit)
		}
	})

	t.Run("an idle client does not grow its limit", func(t *testing.T) {
		l := newLimiter(initialLimit, false)
		for range 1000 {
			l.tryAcquire()
			l.release(t0, signalOK, t0.Add(time.Hour))
		}
		if got := l.current(); got != initialLimit {
			t.Errorf("after 1000 lone successes: got limit %d, want %d", got, initialLimit)
		}
	})

	t.Run("signals that say nothing change nothing", func(t *testing.T) {
		l := newLimiter(initialLimit, false)
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

func TestLimiterQueue(t *testing.T) {
	ctx := context.Background()
	// queue starts waiters on l one after the other, each queued before the
	// next starts, and returns the channel their admissions arrive on, in
	// the order they were admitted.
	queue := func(t *testing.T, l *limiter, ids ...int) <-chan int {
		t.Helper()
		admitted := make(chan int, len(ids))
		for _, id := range ids {
			before := l.waiting()
			go func() {
				if _, _, err := l.acquire(ctx, time.Time{}, nil); err != nil {
					t.Errorf("waiter %d: %v", id, err)
				}
				admitted <- id
			}()
			for l.waiting() == before {
				time.Sleep(time.Millisecond)
			}
		}
		return admitted
	}

	t.Run("waiters are admitted in arrival order as places free", func(t *testing.T) {
		l := newLimiter(1, true)
		if ok, _ := l.tryAcquire(); !ok {
			t.Fatal("first attempt turned away")
		}
		admitted := queue(t, l, 1, 2, 3)
		for want := 1; want <= 3; want++ {
			l.release(time.Time{}, signalNone, time.Now())
			if got := <-admitted; got != want {
				t.Fatalf("got waiter %d admitted, want %d", got, want)
			}
		}
		if got := l.waiting(); got != 0 {
			t.Errorf("got %d still waiting, want 0", got)
		}
	})

	t.Run("a newcomer does not pass the queue", func(t *testing.T) {
		l := newLimiter(1, true)
		l.tryAcquire()
		admitted := queue(t, l, 1)
		if ok, _ := l.tryAcquire(); ok {
			t.Fatal("a newcomer was admitted with every place taken")
		}
		l.release(time.Time{}, signalNone, time.Now())
		if got := <-admitted; got != 1 {
			t.Fatalf("got waiter %d, want 1", got)
		}
		if ok, _ := l.tryAcquire(); ok {
			t.Error("a newcomer was admitted over the waiter that took the freed place")
		}
	})

	t.Run("ErrOverloaded only once the wait's deadline has passed", func(t *testing.T) {
		l := newLimiter(1, false)
		l.tryAcquire()
		if _, _, err := l.acquire(ctx, time.Now().Add(-time.Millisecond), nil); !errors.Is(err, ErrOverloaded) {
			t.Fatalf("deadline already past: got %v, want ErrOverloaded", err)
		}
		if _, _, err := l.acquire(ctx, time.Now().Add(5*time.Millisecond), nil); !errors.Is(err, ErrOverloaded) {
			t.Fatalf("deadline reached while queued: got %v, want ErrOverloaded", err)
		}
		if got := l.waiting(); got != 0 {
			t.Errorf("got %d still waiting, want the expired waiter gone", got)
		}
	})

	t.Run("a waiter whose context ends leaves the queue and takes no place", func(t *testing.T) {
		l := newLimiter(1, false)
		l.tryAcquire()
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, _, err := l.acquire(wctx, time.Time{}, nil)
			done <- err
		}()
		for l.waiting() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
		l.release(time.Time{}, signalNone, time.Now())
		if ok, _ := l.tryAcquire(); !ok {
			t.Error("the place freed after a cancelled waiter left was not free")
		}
	})

	t.Run("closing wakes waiters with ErrClosed", func(t *testing.T) {
		l := newLimiter(1, true)
		l.tryAcquire()
		closing := make(chan struct{})
		close(closing)
		if _, _, err := l.acquire(ctx, time.Time{}, closing); !errors.Is(err, ErrClosed) {
			t.Errorf("got %v, want ErrClosed", err)
		}
	})

	t.Run("a fixed limit ignores signals", func(t *testing.T) {
		l := newLimiter(4, true)
		for range 3 {
			l.tryAcquire()
			l.release(time.Now(), signalCongested, time.Now())
		}
		if got := l.current(); got != 4 {
			t.Errorf("got limit %d, want 4", got)
		}
	})
}

func TestLimiterSlowStart(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name        string
		pools       []int
		start, grow int // the limit at first, and after many successes
	}{
		{"pools smaller than the initial limit", []int{10, 20, 10}, 10, 10},
		{"up to the smallest pool", []int{256, 128, 96}, initialLimit, 96},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []*redis.Client
			for _, p := range tc.pools {
				n := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", PoolSize: p})
				t.Cleanup(func() { n.Close() })
				nodes = append(nodes, n)
			}
			l := newLimiter(poolLimit(nodes), false)
			if got := l.current(); got != tc.start {
				t.Fatalf("at first: got limit %d, want %d", got, tc.start)
			}
			for range 1000 {
				l.tryAcquire()
				l.release(t0, signalOK, t0)
			}
			if got := l.current(); got != tc.grow {
				t.Errorf("after 1000 successes: got limit %d, want %d", got, tc.grow)
			}
		})
	}
}

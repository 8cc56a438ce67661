package inventory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/redlock"
)

// Guard is how a reservation's read-modify-write of the stock is protected.
type Guard string

// The guards, compared under the same faults.
const (
	// GuardNone reads the stock, computes and writes it back, with no lock:
	// the baseline that loses updates under contention.
	GuardNone Guard = "none"
	// GuardRedisSingle takes SET NX PX on one Redis node: an efficiency
	// lock, gone with its node.
	GuardRedisSingle Guard = "redis-single"
	// GuardRedlock is the classic design from the Redlock docs: acquire
	// lock:sku:<sku>, read, write, release in a deferred call. Safe only if
	// the critical section ends within the lock's validity.
	GuardRedlock Guard = "redlock"
	// GuardRedlockFenced is Redlock plus a fencing token from the store's
	// monotonic counter: the row is fenced before the read and the write
	// applies only if the row still carries the token, so a holder whose
	// lock expired under it cannot overwrite a newer holder's work.
	GuardRedlockFenced Guard = "redlock-fenced"
	// GuardDBAtomic lets the database decide: UPDATE … SET stock = stock − q
	// WHERE stock >= q, no lock at all.
	GuardDBAtomic Guard = "db-atomic"
	// GuardRedsync is the critical section of GuardRedlock through
	// go-redsync/redsync v4 as its users run it: its own defaults (8 s expiry
	// unless the service's TTL, 32 tries, 50–250 ms between them, no fail
	// fast) over plain go-redis clients with go-redis's default timeouts. It
	// is the "long timeout" client of the common mistakes.
	GuardRedsync Guard = "redsync"

	// GuardRedlockDel is GuardRedlock released with a plain DEL of the key,
	// without checking that the key still holds this holder's token: the
	// mistake the Redlock docs warn against. A holder whose lock expired
	// deletes the next holder's key and lets a third one in. It exists to
	// be compared with GuardRedlock (Comparisons), never to protect
	// anything: ParseGuard, and so `redlab serve`, refuse it.
	GuardRedlockDel Guard = "redlock-del"

	// guardRedlockFencedNaive checks the token only at write time
	// (last_fence <= t, then last_fence = t). It is here to show that this
	// still loses updates in a read-modify-write when two holders overlap;
	// it is deliberately absent from Guards and ParseGuard.
	guardRedlockFencedNaive Guard = "redlock-fenced-naive"
)

// Guards lists the guards a service can be started with.
func Guards() []Guard {
	return []Guard{GuardNone, GuardRedisSingle, GuardRedlock, GuardRedlockFenced, GuardDBAtomic, GuardRedsync}
}

// Comparisons lists the guards that exist only to show a mistake side by
// side with the right practice: the load generator and the drills run
// them, a service never does (ParseGuard refuses them).
func Comparisons() []Guard { return []Guard{GuardRedlockDel} }

// ErrComparisonGuard is returned by ParseGuard for a guard of Comparisons.
var ErrComparisonGuard = errors.New("inventory: comparison guard")

// ParseGuard returns the guard named s, one of Guards: what a service can
// be started with. A guard of Comparisons is refused with
// ErrComparisonGuard, saying why.
func ParseGuard(s string) (Guard, error) {
	for _, g := range Guards() {
		if string(g) == s {
			return g, nil
		}
	}
	for _, g := range Comparisons() {
		if string(g) == s {
			return "", fmt.Errorf("%w: %s releases its lock with a plain DEL, the mistake it exists to show; "+
				"`redlab load` and the drills run it next to redlock, a service never does", ErrComparisonGuard, g)
		}
	}
	return "", fmt.Errorf("inventory: unknown guard %q (want one of %s)", s, guardNames(Guards()))
}

// ParseAnyGuard returns the guard named s, one of Guards or Comparisons:
// what the load generator and the drills accept.
func ParseAnyGuard(s string) (Guard, error) {
	for _, g := range Comparisons() {
		if string(g) == s {
			return g, nil
		}
	}
	g, err := ParseGuard(s)
	if err != nil {
		return "", fmt.Errorf("inventory: unknown guard %q (want one of %s)", s, guardNames(append(Guards(), Comparisons()...)))
	}
	return g, nil
}

func guardNames(gs []Guard) string {
	names := make([]string, len(gs))
	for i, g := range gs {
		names[i] = string(g)
	}
	return strings.Join(names, ", ")
}

func (g Guard) known() bool {
	_, err := ParseAnyGuard(string(g))
	return err == nil || g == guardRedlockFencedNaive
}

// NeedsNodes reports whether the guard takes a lock on Redis nodes (and so
// needs lock nodes to run).
func (g Guard) NeedsNodes() bool { return g.redlock() || g == GuardRedisSingle || g == GuardRedsync }

// TimesNodes reports whether the guard reports each lock node's reply (the
// guards built on this repository's Redlock client, whose observer sees
// every node's answer).
func (g Guard) TimesNodes() bool { return g.redlock() }

// redlock reports whether the guard takes a lock with this repository's
// Redlock client.
func (g Guard) redlock() bool {
	return g == GuardRedlock || g == GuardRedlockFenced || g == GuardRedlockDel || g == guardRedlockFencedNaive
}

// lockKey is the lock's Redis key for a SKU.
func lockKey(sku string) string { return "lock:sku:" + sku }

// unlocked runs a critical section with no lock, timing it as the hold.
func (s *Service) unlocked(ctx context.Context, req Request, body func(context.Context) (Reservation, error)) (Reservation, Timing, error) {
	start := time.Now()
	r, err := body(ctx)
	return r, Timing{Hold: time.Since(start)}, err
}

// withRedlock is the classic Redlock critical section: acquire, run body,
// release in a deferred call. It does not check the lock's validity before
// writing (that would only narrow the window, not close it): the pause test
// shows what that costs, and the fenced guard what fixes it.
func (s *Service) withRedlock(ctx context.Context, req Request, body func(context.Context) (Reservation, error)) (r Reservation, t Timing, err error) {
	key := lockKey(req.SKU)
	actx, cancel := context.WithTimeout(ctx, s.cfg.acquireTimeout)
	start := time.Now()
	lock, err := s.locker.Acquire(actx, key, s.cfg.ttl)
	cancel()
	if err != nil {
		t.Acquire = time.Since(start)
		var ae *redlock.AttemptError
		if errors.As(err, &ae) {
			t.Attempts = ae.Attempts
		}
		return Reservation{}, t, redlockError(ctx, err)
	}
	t.Acquire, t.Attempts = lock.AcquireTime(), lock.Attempts()
	granted := time.Now()
	defer func() {
		released := time.Now()
		t.Hold = released.Sub(granted)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		// A release that finds the lock expired or taken over is not this
		// reservation's failure: its write has already happened or not.
		if s.guard == GuardRedlockDel {
			s.deleteRelease(rctx, key)
		} else {
			_ = lock.Release(rctx)
		}
		cancel()
		t.Release = time.Since(released)
		s.observe(Hold{Key: key, Holder: s.cfg.holder, Token: lock.Token(), Granted: granted, Released: released, ValidUntil: lock.Deadline()})
	}()
	r, err = body(ctx)
	return r, t, err
}

// deleteRelease is GuardRedlockDel's release: DEL key on every node, in
// parallel, whoever's token the key holds now. When this holder's lock has
// expired and another holder took the key, this deletes the other holder's
// lock: the mistake the guard exists to show.
func (s *Service) deleteRelease(ctx context.Context, key string) {
	var wg sync.WaitGroup
	for _, n := range s.cfg.delNodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = n.Del(ctx, key).Err()
		}()
	}
	wg.Wait()
}

// redlockError translates a failed Acquire into the package's errors.
func redlockError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("inventory: acquire lock: %w", ctx.Err())
	case errors.Is(err, redlock.ErrOverloaded):
		return fmt.Errorf("%w: %w", ErrOverloaded, err)
	case errors.Is(err, redlock.ErrUnavailable), errors.Is(err, redlock.ErrValidityExhausted):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.Is(err, redlock.ErrContended), errors.Is(err, context.DeadlineExceeded):
		// Our acquire timeout ran out while someone else held the lock.
		return fmt.Errorf("%w: %w", ErrContended, err)
	default:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}

// releaseScript deletes the key only if it still holds our token.
var releaseScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("del", KEYS[1])
end
return 0`)

// withSingleLock guards body with SET NX PX on one node, released by
// compare-and-delete: efficient, and unsafe the moment that node restarts
// without its data or fails over.
func (s *Service) withSingleLock(ctx context.Context, req Request, body func(context.Context) (Reservation, error)) (r Reservation, t Timing, err error) {
	key := lockKey(req.SKU)
	token := randomHex(16)
	start := time.Now()
	var sent time.Time
	t.Attempts, sent, err = s.acquireSingle(ctx, key, token)
	t.Acquire = time.Since(start)
	if err != nil {
		return Reservation{}, t, err
	}
	granted := time.Now()
	defer func() {
		released := time.Now()
		t.Hold = released.Sub(granted)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_ = releaseScript.Run(rctx, s.cfg.single, []string{key}, token).Err()
		cancel()
		t.Release = time.Since(released)
		s.observe(Hold{Key: key, Holder: s.cfg.holder, Token: token, Granted: granted, Released: released, ValidUntil: sent.Add(s.cfg.ttl)})
	}()
	r, err = body(ctx)
	return r, t, err
}

// acquireSingle retries SET NX PX with jittered backoff until it wins or the
// acquire timeout ends, and returns the attempts made and when the winning
// SET was sent (its TTL runs from no earlier than that).
func (s *Service) acquireSingle(ctx context.Context, key, token string) (int, time.Time, error) {
	actx, cancel := context.WithTimeout(ctx, s.cfg.acquireTimeout)
	defer cancel()
	var cause error
	for attempt := 1; ; attempt++ {
		sent := time.Now()
		ok, err := s.cfg.single.SetNX(actx, key, token, s.cfg.ttl).Result()
		if err == nil && ok {
			return attempt, sent, nil
		}
		if err == nil {
			cause = fmt.Errorf("%w: %q is held", ErrContended, key)
		} else {
			// The SET may have landed even though its reply did not.
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			_ = releaseScript.Run(rctx, s.cfg.single, []string{key}, token).Err()
			rcancel()
			// When the acquire timeout cut this attempt short, the node's
			// last answer stays the reason.
			if actx.Err() == nil || cause == nil {
				cause = fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
		}
		timer := time.NewTimer(singleBackoff(attempt))
		select {
		case <-timer.C:
		case <-actx.Done():
			timer.Stop()
			if ctx.Err() != nil {
				return attempt, time.Time{}, fmt.Errorf("inventory: acquire lock: %w", ctx.Err())
			}
			return attempt, time.Time{}, cause
		}
	}
}

// singleBackoff is the wait before retry n of the single-node lock: a
// random 5–15 ms, doubling up to 80–240 ms.
func singleBackoff(n int) time.Duration {
	base := 5 * time.Millisecond << min(n-1, 4)
	return base + rand.N(2*base)
}

func (s *Service) observe(h Hold) {
	if s.cfg.onHold != nil {
		s.cfg.onHold(h)
	}
}

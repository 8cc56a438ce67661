package inventory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// singleGuard is GuardRedisSingle: SET NX PX on one node, released by
// compare-and-delete.
type singleGuard struct{ s *Service }

func newSingleGuard(s *Service) (guard, error) {
	if s.cfg.single == nil {
		return nil, fmt.Errorf("inventory: guard %s needs WithSingleNode", s.guard)
	}
	return singleGuard{s}, nil
}

func (g singleGuard) reserve(ctx context.Context, req Request) (Reservation, Timing, error) {
	return g.s.withSingleLock(ctx, req, func(ctx context.Context) (Reservation, error) {
		return g.s.readModifyWrite(ctx, req, writeBlind, 0)
	})
}

func (g singleGuard) ready(ctx context.Context) (int, int, error) {
	if err := g.s.cfg.single.Ping(ctx).Err(); err != nil {
		return 0, 1, fmt.Errorf("inventory: redis node: %w", err)
	}
	return 1, 1, nil
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

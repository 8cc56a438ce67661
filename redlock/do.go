package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DoOption configures one Do call.
type DoOption func(*doConfig)

type doConfig struct {
	every time.Duration
	max   int
}

// WithAutoExtend extends the lock by its TTL every `every` while fn runs, at
// most max times. Choose every well below the TTL (a third, say): an extension
// that comes after the validity ran out is refused. When an extension finds
// the lock lost (ErrNotHeld), fn's context is cancelled at once.
func WithAutoExtend(every time.Duration, max int) DoOption {
	return func(d *doConfig) { d.every, d.max = every, max }
}

// Do acquires the lock on key (retrying like Acquire), runs fn, and releases
// the lock, also when fn fails or panics or ctx is cancelled (the release
// then gets a fresh, short context).
//
// fn's context ends when the validity runs out, and then
// errors.Is(context.Cause(ctx), ErrExpired) holds (ErrNotHeld when an
// auto-extension found the lock lost). Without auto-extension it has the lock's Deadline and its Err
// is context.DeadlineExceeded; with WithAutoExtend the deadline moves, so the
// context has none of its own and its Err is context.Canceled. fn must stop
// touching the protected resource when its context ends.
//
// Do returns the acquire error, or fn's error joined with the release error;
// the release error wraps ErrExpired when fn outlived the lock.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error, opts ...DoOption) (err error) {
	var cfg doConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.max > 0 && cfg.every <= 0 {
		return fmt.Errorf("redlock: auto-extend interval %v must be positive", cfg.every)
	}
	l, err := c.Acquire(ctx, key, ttl)
	if err != nil {
		return err
	}
	defer func() {
		rctx := ctx
		if ctx.Err() != nil {
			var cancel context.CancelFunc
			rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 2*c.timeout)
			defer cancel()
		}
		err = errors.Join(err, l.Release(rctx))
	}()

	if cfg.max <= 0 {
		fctx, cancel := context.WithDeadlineCause(ctx, l.Deadline(), ErrExpired)
		defer cancel()
		return fn(fctx)
	}

	fctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.keepAlive(fctx, stop, cancel, ttl, cfg)
	}()
	defer func() {
		close(stop)
		wg.Wait()
		cancel(nil)
	}()
	return fn(fctx)
}

// keepAlive cancels ctx when the validity runs out and extends the lock every
// cfg.every, at most cfg.max times, until stop is closed.
func (l *Lock) keepAlive(ctx context.Context, stop <-chan struct{}, cancel context.CancelCauseFunc, ttl time.Duration, cfg doConfig) {
	expiry := time.NewTimer(l.Validity())
	defer expiry.Stop()
	tick := time.NewTicker(cfg.every)
	defer tick.Stop()
	ticks := tick.C
	for n := 0; ; {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-expiry.C:
			cancel(ErrExpired)
			return
		case <-ticks:
			n++
			if n >= cfg.max {
				ticks = nil
			}
			// The extension may not outlast the validity it tries to save.
			ectx, ecancel := context.WithDeadline(ctx, l.Deadline())
			err := l.Extend(ectx, ttl)
			ecancel()
			switch {
			case err == nil:
				expiry.Reset(l.Validity())
			case errors.Is(err, ErrNotHeld), errors.Is(err, ErrExpired):
				cancel(err)
				return
			}
		}
	}
}

package redlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// epoch anchors lock deadlines on the monotonic clock so they fit an atomic.
var epoch = time.Now()

// Lock is a granted lock. Its methods are safe for concurrent use.
type Lock struct {
	c           *Client
	key         string
	token       string
	attempts    int
	acquireTime time.Duration
	deadline    atomic.Int64 // since epoch

	// late marks nodes whose SET was still in flight when the lock was
	// granted; setsDone closes when those SETs have returned. Release waits
	// for it on those nodes, so it cannot overtake a late SET.
	late     []bool
	setsDone <-chan struct{}
}

// Key returns the lock's key.
func (l *Lock) Key() string { return l.key }

// Token returns the random token (32 hex digits) stored under the key. It is
// unique but not ordered: it cannot serve as a fencing token.
func (l *Lock) Token() string { return l.token }

// Deadline returns when the validity runs out. It carries a monotonic clock
// reading, so time.Until(l.Deadline()) is immune to wall-clock jumps.
func (l *Lock) Deadline() time.Time {
	return epoch.Add(time.Duration(l.deadline.Load()))
}

// Validity returns the time left before the lock may expire on the nodes
// (negative once it has run out), on the monotonic clock.
func (l *Lock) Validity() time.Duration {
	return time.Duration(l.deadline.Load()) - time.Since(epoch)
}

// Attempts returns how many attempts Acquire needed.
func (l *Lock) Attempts() int { return l.attempts }

// AcquireTime returns how long the whole Acquire took, backoffs included.
func (l *Lock) AcquireTime() time.Duration { return l.acquireTime }

func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("redlock: token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func checkArgs(key string, ttl time.Duration) error {
	if key == "" {
		return errors.New("redlock: empty key")
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("redlock: ttl %v is below 1ms", ttl)
	}
	return nil
}

// Acquire tries to take the lock on key for ttl, retrying with the Client's
// Backoff until it succeeds, the context ends or WithMaxAttempts is reached.
// A context without deadline is bounded by ttl: after one TTL any earlier
// holder that does not extend has expired, so waiting longer is a caller's
// explicit choice (give a context with a deadline).
//
// ttl is used in whole milliseconds. The returned Lock's Validity is what is
// left of ttl after the attempt and the drift allowance.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	if err := checkArgs(key, ttl); err != nil {
		return nil, err
	}
	start := time.Now()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ttl)
		defer cancel()
	}
	var (
		last     Event
		sentinel error // the last completed attempt's reason
		timer    *time.Timer
	)
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return nil, newAttemptError(n-1, last, sentinel, err)
		}
		if err := c.admit(ctx); err != nil {
			if errors.Is(err, ErrClosed) {
				return nil, err
			}
			if last.Op == 0 { // refused before the first attempt
				last = Event{Op: OpAcquire, Key: key, Quorum: c.quorum, Start: start}
			}
			return nil, newAttemptError(n-1, last, sentinel, err)
		}
		l, ev, err := c.attempt(ctx, key, ttl, n)
		if err == nil {
			l.attempts, l.acquireTime = n, time.Since(start)
			return l, nil
		}
		if errors.Is(err, ErrClosed) || ev.Op == 0 {
			return nil, err
		}
		last = ev
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, newAttemptError(n, last, sentinel, ctxErr)
		}
		sentinel = err
		if c.cfg.maxAttempts > 0 && n >= c.cfg.maxAttempts {
			return nil, newAttemptError(n, last, sentinel)
		}
		wait, ok := c.cfg.backoff(n)
		if !ok {
			return nil, newAttemptError(n, last, sentinel)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return nil, newAttemptError(n, last, sentinel, ctx.Err())
		}
	}
}

// TryAcquire makes exactly one attempt to take the lock on key for ttl.
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	if err := checkArgs(key, ttl); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := c.admit(ctx); err != nil {
		if errors.Is(err, ErrClosed) {
			return nil, err
		}
		return nil, newAttemptError(0, Event{Op: OpAcquire, Key: key, Quorum: c.quorum, Start: start}, err)
	}
	l, ev, err := c.attempt(ctx, key, ttl, 1)
	if err != nil {
		if ev.Op == 0 {
			return nil, err
		}
		return nil, newAttemptError(1, ev, err)
	}
	l.attempts, l.acquireTime = 1, time.Since(start)
	return l, nil
}

// attempt is one Redlock round. On failure it returns the attempt's Event
// and its reason (a sentinel or the context's error); an Event with Op 0
// means the round never started (closed client, token failure). The caller
// has been admitted (Client.admit); attempt frees the slot once the round is
// decided, or when it never starts.
func (c *Client) attempt(ctx context.Context, key string, ttl time.Duration, n int) (*Lock, Event, error) {
	admitted := true
	leave := func() {
		if admitted {
			admitted = false
			c.leave()
		}
	}
	defer leave()
	token, err := newToken()
	if err != nil {
		return nil, Event{}, err
	}
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	ttl = ttl.Truncate(time.Millisecond)
	set := func(ctx context.Context, node *redis.Client, _ int) (Outcome, error) {
		cmd := redis.NewBoolCmd(ctx, "set", key, token, "px", ms, "nx")
		if err := node.Process(ctx, cmd); err != nil {
			return 0, err
		}
		if cmd.Val() {
			return Granted, nil
		}
		return Taken, nil
	}
	// Runs on each node's goroutine once the attempt is decided, so a SET that
	// answers after a lost decision, or timed out on the client but may have
	// landed on the server, is released too. Taken is a definite "not
	// written" and needs nothing.
	cleanup := func(i int, o Outcome, won bool) {
		if won || o == Taken {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
		defer cancel()
		// EVAL, not EVALSHA: a slow node may not have the script cached, and
		// the NOSCRIPT round trip would cost a second timeout.
		_ = releaseScript.Eval(rctx, c.nodes[i], []string{key}, token).Err()
	}
	r, err := c.fanout(ctx, min(c.timeout, ttl), set, cleanup)
	if err != nil {
		return nil, Event{}, err
	}
	t := r.collect(ctx, c.quorum, true)

	deadline, validity, err := r.grant(t, ttl, ErrContended)
	r.decide(err == nil)

	ev := r.event(OpAcquire, key, n, c.quorum, t, err)
	// Decided: the slot goes to the next attempt; late nodes and the
	// cleanup of a lost round go on in the background.
	leave()
	if err != nil {
		c.observe(ev)
		return nil, ev, err
	}
	ev.Validity = validity
	c.observe(ev)

	l := &Lock{c: c, key: key, token: token}
	l.deadline.Store(int64(deadline))
	for i, nr := range t.nodes {
		if nr.Outcome == Abandoned || nr.Outcome == TimedOut {
			if l.late == nil {
				l.late = make([]bool, len(t.nodes))
			}
			l.late[i] = true
		}
	}
	if l.late != nil {
		l.setsDone = r.done
	}
	return l, ev, nil
}

// Release deletes the lock's key on every node where it still carries this
// lock's token (Lua compare-and-delete, all nodes in parallel). It returns
// once a quorum answered; the remaining nodes are released in the background
// (Client.Close waits for them). The context bounds the wait, not the
// deletion: a cancelled context still releases what it can within the
// request timeout.
//
// Errors wrap ErrExpired when the validity had run out before the call (the
// keys are still deleted where they remain: the critical section outlived
// the lock), ErrNotHeld when our token was missing on too many nodes,
// ErrUnavailable when too many nodes failed.
func (l *Lock) Release(ctx context.Context) error {
	c := l.c
	expired := l.Validity() <= 0
	keys := []string{l.key}
	del := func(ctx context.Context, node *redis.Client, i int) (Outcome, error) {
		run := releaseScript.Run
		if l.late != nil && l.late[i] && !closed(l.setsDone) {
			// Wait for the late SET (bounded by its own timeout), then
			// delete with a fresh budget, in one round trip (EVAL): a
			// node this slow may miss the script and a NOSCRIPT retry
			// would cost a second timeout.
			<-l.setsDone
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
			defer cancel()
			run = releaseScript.Eval
		}
		v, err := run(ctx, node, keys, l.token).Int64()
		if err != nil {
			return 0, err
		}
		if v == 1 {
			return Granted, nil
		}
		return Taken, nil
	}
	r, err := c.fanout(ctx, c.timeout, del, nil)
	if err != nil {
		return err
	}
	t := r.collect(ctx, c.quorum, true)
	r.decide(true)
	if t.yes < c.quorum {
		err = c.verdict(t, ErrNotHeld)
	}
	var errs []error
	if expired {
		errs = append(errs, ErrExpired)
	}
	if err != nil {
		errs = append(errs, err)
	}
	ev := r.event(OpRelease, l.key, 1, c.quorum, t, errors.Join(errs...))
	c.observe(ev)
	if len(errs) > 0 {
		return newAttemptError(1, ev, errs...)
	}
	return nil
}

// Extend resets the lock's TTL to ttl on every node where it still carries
// this lock's token (Lua compare-and-pexpire, all nodes in parallel). It
// succeeds only when a quorum extended and validity is left, measured from
// the start of the call; the Lock's Deadline then moves. It is refused with
// ErrExpired, without touching the nodes, once the validity has run out:
// another client may already hold the lock.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	c := l.c
	if err := checkArgs(l.key, ttl); err != nil {
		return err
	}
	if l.Validity() <= 0 {
		return newAttemptError(0, Event{Op: OpExtend, Key: l.key, Quorum: c.quorum, Start: time.Now(), Err: ErrExpired}, ErrExpired)
	}
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	ttl = ttl.Truncate(time.Millisecond)
	keys := []string{l.key}
	pexpire := func(ctx context.Context, node *redis.Client, _ int) (Outcome, error) {
		v, err := extendScript.Run(ctx, node, keys, l.token, ms).Int64()
		if err != nil {
			return 0, err
		}
		if v == 1 {
			return Granted, nil
		}
		return Taken, nil
	}
	r, err := c.fanout(ctx, min(c.timeout, ttl), pexpire, nil)
	if err != nil {
		return err
	}
	t := r.collect(ctx, c.quorum, true)
	r.decide(true)

	deadline, validity, err := r.grant(t, ttl, ErrNotHeld)
	ev := r.event(OpExtend, l.key, 1, c.quorum, t, err)
	if err != nil {
		c.observe(ev)
		return newAttemptError(1, ev, err)
	}
	l.deadline.Store(int64(deadline))
	ev.Validity = validity
	c.observe(ev)
	return nil
}

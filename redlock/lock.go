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
	// granted. Release waits for a late node's own SET to return
	// (set.at[i].answered open) before it deletes there, so it cannot overtake it;
	// the other nodes, late or not, do not wait for it.
	late []bool

	// set is the acquire round: its answers say which nodes the SET may
	// have written to (a late node's answer only once set.at[i].answered is
	// open).
	// extended adds, per node, what Extend learnt (extMayHold, extUnsure).
	set      *round
	extended []atomic.Uint32
	// expiry (since epoch) is when every key this lock may have set or
	// extended has expired, drift included: background release retries
	// stop there.
	expiry atomic.Int64
}

// Bits of Lock.extended.
const (
	extMayHold uint32 = 1 << iota // an extend restored or may have restored the key
	extUnsure                     // an extend's outcome on the node is unknown
)

// holds reports whether node i may hold the lock's key, and whether that is
// unknown rather than known (see written). For a late node it must be called
// only once set.at[i].answered is open.
func (l *Lock) holds(i int) (mayHold, unsure bool) {
	mayHold, unsure = written(l.set.at[i].answer)
	x := l.extended[i].Load()
	return mayHold || x&extMayHold != 0, unsure || x&extUnsure != 0
}

// expireLater moves expiry to at when that is later.
func (l *Lock) expireLater(at time.Duration) {
	for {
		cur := l.expiry.Load()
		if int64(at) <= cur || l.expiry.CompareAndSwap(cur, int64(at)) {
			return
		}
	}
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
// It stops early when the circuit breaker is open (see WithCircuitBreaker):
// the error then wraps ErrCircuitOpen and ErrUnavailable; and when a retry
// after an attempt that found too few nodes would exceed the retry budget
// (the error is that attempt's). An attempt over the Client's concurrency
// limit waits for a place; one that found none in time (ErrOverloaded) is
// retried after the Backoff while the context lasts, and a call that ends so
// wraps ErrOverloaded. See WithOverloadControl.
//
// ttl is used in whole milliseconds. The returned Lock's Validity is what is
// left of ttl after the attempt and the drift allowance.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	if err := checkArgs(key, ttl); err != nil {
		return nil, err
	}
	start := time.Now()
	l, err := c.acquire(ctx, key, ttl, start)
	c.observeAcquire(key, ttl, start, l, err)
	return l, err
}

func (c *Client) acquire(ctx context.Context, key string, ttl time.Duration, start time.Time) (*Lock, error) {
	// A context without deadline gets one, start+ttl, before the first
	// retry: the first attempt is bounded already (its wait for a place by
	// ttl, its round by the request timeout), and most calls end with it,
	// so they do without the context and its timer.
	_, bounded := ctx.Deadline()
	var (
		last     Event
		sentinel error // the last completed attempt's reason
		sent     int   // attempts sent to the nodes
		timer    *time.Timer
	)
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return nil, newAttemptError(sent, last, sentinel, err)
		}
		l, ev, err := c.try(ctx, key, ttl, n, sent == 0)
		if err == nil {
			l.attempts, l.acquireTime = sent+1, time.Since(start)
			return l, nil
		}
		switch {
		case errors.Is(err, ErrClosed) || ev.Op == 0:
			return nil, err
		case ev.Overloaded:
			// Not admitted before its deadline drew near: whatever
			// time is left goes to backing off and trying again, not
			// to coming straight back.
			if last.Op == 0 {
				last = ev
			}
			sentinel = err
		case ev.Rejected || len(ev.Nodes) == 0:
			// Refused before anything was sent (the breaker, or the
			// context while waiting for a place).
			if last.Op == 0 {
				last = ev
			}
			return nil, newAttemptError(sent, last, sentinel, err)
		default:
			sent++
			last = ev
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, newAttemptError(sent, last, sentinel, ctxErr)
			}
			sentinel = err
			if ev.Breaker == BreakerOpen || ev.Breaker == BreakerHalfOpen {
				// The quorum is unreachable (this attempt opened the
				// breaker, or another caller's probe is out): a retry
				// would be refused.
				return nil, newAttemptError(sent, last, sentinel, ErrCircuitOpen)
			}
		}
		if c.cfg.maxAttempts > 0 && n >= c.cfg.maxAttempts {
			return nil, newAttemptError(sent, last, sentinel)
		}
		if !ev.Overloaded && c.budget != nil && !errors.Is(err, ErrContended) && !c.budget.withdraw() {
			// Retrying a failure that comes from the nodes, not from
			// another holder, is what feeds an overload: only a share
			// of first attempts may be retried.
			return nil, newAttemptError(sent, last, sentinel)
		}
		wait, ok := c.cfg.backoff(n)
		if !ok {
			return nil, newAttemptError(sent, last, sentinel)
		}
		if !bounded {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, start.Add(ttl))
			defer cancel()
			bounded = true
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
			return nil, newAttemptError(sent, last, sentinel, ctx.Err())
		}
	}
}

// TryAcquire makes exactly one attempt to take the lock on key for ttl, or
// none when the circuit breaker refuses it (the error then wraps
// ErrCircuitOpen and ErrUnavailable) or no place under the concurrency limit
// comes in time (the error wraps ErrOverloaded; it waits for one as Acquire
// does, see WithOverloadControl).
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	if err := checkArgs(key, ttl); err != nil {
		return nil, err
	}
	start := time.Now()
	l, err := c.tryAcquire(ctx, key, ttl, start)
	c.observeAcquire(key, ttl, start, l, err)
	return l, err
}

func (c *Client) tryAcquire(ctx context.Context, key string, ttl time.Duration, start time.Time) (*Lock, error) {
	l, ev, err := c.try(ctx, key, ttl, 1, true)
	if err != nil {
		switch {
		case errors.Is(err, ErrClosed) || ev.Op == 0:
			return nil, err
		case ev.Rejected || ev.Overloaded || len(ev.Nodes) == 0:
			return nil, newAttemptError(0, ev, err)
		}
		return nil, newAttemptError(1, ev, err)
	}
	l.attempts, l.acquireTime = 1, time.Since(start)
	return l, nil
}

// try is attempt n of a call, first when none of the call's attempts has
// been sent yet: through the breaker and the concurrency bound, then one
// Redlock round. When nothing was sent, the Event has no Nodes (Rejected by
// the breaker, Overloaded when no place in the limit came in time, or a
// context that ended while waiting for one); an Event with Op 0 means the
// call cannot go on (closed client, token failure).
func (c *Client) try(ctx context.Context, key string, ttl time.Duration, n int, first bool) (*Lock, Event, error) {
	p, state := c.gate()
	if p == passRejected {
		return nil, c.reject(key, ttl, n, state), ErrCircuitOpen
	}
	waitStart := time.Now()
	adm, err := c.admit(ctx, ttl)
	if err != nil {
		state, _ := c.passed(p, quorumUnknown, nil)
		switch {
		case errors.Is(err, ErrClosed):
			return nil, Event{}, err
		case errors.Is(err, ErrOverloaded):
			return nil, c.overloaded(key, ttl, n, adm.limit, state), err
		}
		return nil, Event{Op: OpAcquire, Key: key, Attempt: n, Quorum: c.quorum, TTL: ttl, Start: waitStart, Limit: adm.limit}, err
	}
	if first && c.budget != nil {
		c.budget.deposit()
	}
	return c.attempt(ctx, key, ttl, n, p, adm)
}

// attempt is one Redlock round. On failure it returns the attempt's Event
// and its reason (a sentinel or the context's error); an Event with Op 0
// means the round never started (closed client, token failure). The caller
// has been admitted as adm and let through by the breaker as p; attempt
// gives the admission back once the round is decided, or when it never
// starts, and reports the round to the breaker.
func (c *Client) attempt(ctx context.Context, key string, ttl time.Duration, n int, p pass, adm admission) (*Lock, Event, error) {
	defer c.leave(&adm, signalNone)
	reported := false
	defer func() {
		if !reported {
			c.passed(p, quorumUnknown, nil)
		}
	}()
	token, err := newToken()
	if err != nil {
		return nil, Event{}, err
	}
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	ttl = ttl.Truncate(time.Millisecond)
	// Built and boxed once for every node's command (go-redis only reads
	// a command's arguments), not once per node.
	setArgs := []any{"set", key, token, "px", ms, "nx"}
	set := func(ctx context.Context, node *redis.Client, _ int) answer {
		cmd := redis.NewBoolCmd(ctx, setArgs...)
		if err := node.Process(ctx, cmd); err != nil {
			return answer{err: err}
		}
		if cmd.Val() {
			return answer{outcome: Granted}
		}
		return answer{outcome: Taken}
	}
	// A key this attempt sets has expired everywhere by then (a SET that a
	// stalled node runs later excepted; see settle).
	until := time.Since(epoch) + ttl + c.cfg.drift(ttl)
	base := context.WithoutCancel(ctx)
	// Runs on each node's goroutine once the attempt is decided, so a SET that
	// answers after a lost decision, or timed out on the client but may have
	// landed on the server (or still be queued there), is released too, and
	// retried until the node answers. Taken, a Redis error or a request that
	// never left is a definite "not written" and needs nothing.
	cleanup := func(i int, a answer, won bool) {
		mayHold, unsure := written(a)
		if won || !mayHold {
			return
		}
		c.settle(base, i, key, token, c.releaseOnce(base, i, key, token), unsure, until)
	}
	r, err := c.fanout(base, min(c.timeout, ttl), set, cleanup)
	if err != nil {
		return nil, Event{}, err
	}
	t := r.collect(ctx, c.quorum, true)

	deadline, validity, err := r.grant(t, ttl, ErrContended)
	r.decide(err == nil)

	ev := r.event(OpAcquire, key, n, c.quorum, t, err)
	ev.TTL = ttl
	ev.Probe = p == passProbe
	ev.Limit = adm.limit
	var buf [8]NodeResult
	sig, h, counted := c.assess(t, err, ev.Elapsed, adm.queued, buf[:0])
	ev.Breaker, ev.BreakerChanged = c.passed(p, h, counted)
	reported = true
	// Decided: the place goes to the next attempt; late nodes and the
	// cleanup of a lost round go on in the background.
	c.leave(&adm, sig)
	if err != nil {
		c.observe(ev)
		return nil, ev, err
	}
	ev.Validity = validity
	c.observe(ev)

	l := &Lock{c: c, key: key, token: token, set: r, extended: make([]atomic.Uint32, len(c.nodes))}
	l.deadline.Store(int64(deadline))
	l.expiry.Store(int64(until))
	for i, nr := range t.nodes {
		if nr.Outcome == Abandoned || nr.Outcome == TimedOut {
			if l.late == nil {
				l.late = make([]bool, len(t.nodes))
			}
			l.late[i] = true
		}
	}
	return l, ev, nil
}

// Release deletes the lock's key on every node where it still carries this
// lock's token (Lua compare-and-delete, all nodes in parallel). It returns
// once a quorum answered; the remaining nodes are released in the background.
// A node that may hold the key and whose release did not get an answer (a
// timeout, a broken connection, a node that is down) is retried in the
// background, with backoff, until it answers or the key has expired; Close
// ends those retries (see Client.Close). The context bounds the wait, not the
// deletion: a cancelled context still releases what it can.
//
// Errors wrap ErrExpired when the validity had run out before the call (the
// keys are still deleted where they remain: the critical section outlived
// the lock), ErrNotHeld when our token was missing on too many nodes,
// ErrUnavailable when too many nodes failed.
func (l *Lock) Release(ctx context.Context) error {
	c := l.c
	expired := l.Validity() <= 0
	call := releaseScript.call(l.key, l.token)
	base := context.WithoutCancel(ctx)
	del := func(ctx context.Context, node *redis.Client, i int) answer {
		run := call.run
		if l.late != nil && l.late[i] && !l.set.at[i].answered.isOpen() {
			// Wait for the late SET (bounded by its own timeout). Usually
			// it was a step behind the quorum and the round's budget is
			// nearly whole. When the wait took more than half of it, delete
			// with a fresh budget, in one round trip (EVAL): a node this
			// slow may miss the script and a NOSCRIPT retry would cost a
			// second timeout.
			l.set.at[i].answered.wait()
			if dl, _ := ctx.Deadline(); time.Until(dl) < c.timeout/2 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(base, c.timeout)
				defer cancel()
				run = call.eval
			}
		}
		return releaseAnswer(run(ctx, node).Result())
	}
	// Runs on each node's goroutine once Release has decided (a late node's
	// SET has returned by then: del waited for it).
	after := func(i int, a answer, _ bool) {
		if mayHold, unsure := l.holds(i); mayHold {
			c.settle(base, i, l.key, l.token, a, unsure, time.Duration(l.expiry.Load()))
		}
	}
	at := c.enterRelease()
	r, err := c.fanout(base, c.timeout, del, after)
	if err != nil {
		c.leaveRelease(at, 0)
		return err
	}
	t := r.collect(ctx, c.quorum, true)
	r.decide(true)
	c.leaveRelease(at, time.Since(r.start))
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
// this lock's token (Lua compare-and-pexpire, all nodes in parallel). Where
// the key is missing altogether, as on a node that restarted without its
// data, it sets it again with our token (SET NX PX, so never over another
// owner's key) and counts that node's vote as restored (Event.Restored):
// without that, a holder that extends would quietly lose its majority one
// node restart at a time. It succeeds only when a quorum extended or
// restored and validity is left, measured from the start of the call; the
// Lock's Deadline then moves. It is refused with ErrExpired, without
// touching the nodes, once the validity has run out: another client may
// already hold the lock, and restoring would be unsafe.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	c := l.c
	if err := checkArgs(l.key, ttl); err != nil {
		return err
	}
	if l.Validity() <= 0 {
		ev := Event{Op: OpExtend, Key: l.key, Quorum: c.quorum, TTL: ttl, Start: time.Now(), Err: ErrExpired}
		c.observe(ev)
		return newAttemptError(0, ev, ErrExpired)
	}
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	ttl = ttl.Truncate(time.Millisecond)
	call := extendScript.call(l.key, l.token, ms)
	pexpire := func(ctx context.Context, node *redis.Client, _ int) answer {
		v, err := call.run(ctx, node).Result()
		switch {
		case err != nil:
			return answer{err: err}
		case v == 1:
			return answer{outcome: Granted}
		case v == 2:
			return answer{outcome: Granted, restored: true}
		}
		return answer{outcome: Taken}
	}
	until := time.Since(epoch) + ttl + c.cfg.drift(ttl)
	r, err := c.fanout(context.WithoutCancel(ctx), min(c.timeout, ttl), pexpire, nil)
	if err != nil {
		return err
	}
	t := r.collect(ctx, c.quorum, true)
	r.decide(true)

	// Whatever the verdict, Release must know where this round may have
	// extended or restored the key, and until when.
	touched := false
	for i, nr := range t.nodes {
		var bits uint32
		switch {
		case nr.Outcome == Granted:
			bits = extMayHold
		case nr.Outcome == Abandoned || unknown(nr.Err):
			bits = extMayHold | extUnsure
		}
		if bits != 0 {
			l.extended[i].Or(bits)
			touched = true
		}
	}
	if touched {
		l.expireLater(until)
	}

	deadline, validity, err := r.grant(t, ttl, ErrNotHeld)
	ev := r.event(OpExtend, l.key, 1, c.quorum, t, err)
	ev.TTL = ttl
	if err != nil {
		c.observe(ev)
		return newAttemptError(1, ev, err)
	}
	l.deadline.Store(int64(deadline))
	ev.Validity = validity
	c.observe(ev)
	return nil
}

package redlock

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A round sends one operation to every node in parallel. The caller collects
// replies until it can decide, then calls decide; node goroutines that answer
// later run their after hook (which learns whether the round was won) and
// end. Every goroutine of a round is counted in the Client's WaitGroup.
type round struct {
	c     *Client
	start time.Time
	ctx   roundCtx // for the node requests: not cancelled by the caller, bounded by the timeout
	op    nodeOp
	after afterOp
	// replies carries the index of each node as it answers; its answer is
	// at[i].answer, written before the send.
	replies chan int
	decided latch // opened by decide; won is written before
	won     bool

	// at[i] is node i's own answer, written by its goroutine before it
	// sends its index on replies and opens at[i].answered: read it after
	// receiving that index, or after at[i].answered is open. One slice for
	// both, so a round costs one allocation for them.
	at []nodeAnswer
}

// nodeAnswer is one node's answer in a round, and the latch its goroutine
// opens once the answer is written.
type nodeAnswer struct {
	answer
	answered latch
}

// answer is what one node's request came to.
type answer struct {
	outcome  Outcome // Granted or Taken; Failed or TimedOut when err is set
	restored bool    // extend: the key was missing and our token was set again
	err      error
	at       time.Duration // since the round's start; set by the round, not the op
}

// latch is a one-shot gate: armed (closed) when a round starts, opened once
// by the node's goroutine. It is a mutex held across goroutines rather than
// a channel per node, so a round costs one allocation for all its latches
// instead of one per node (a sync.Mutex may be unlocked by another
// goroutine than the one that locked it).
type latch struct{ mu sync.Mutex }

func (l *latch) arm()  { l.mu.Lock() }
func (l *latch) open() { l.mu.Unlock() }

// wait blocks until the latch is open.
func (l *latch) wait() {
	l.mu.Lock()
	l.mu.Unlock() //nolint:staticcheck // an empty critical section: waiting is the point
}

// isOpen reports whether the latch has opened, without blocking.
func (l *latch) isOpen() bool {
	if !l.mu.TryLock() {
		return false
	}
	l.mu.Unlock()
	return true
}

// nodeOp runs the round's request on one node. It answers Granted or Taken,
// or an error (classified as Failed or TimedOut).
type nodeOp func(ctx context.Context, node *redis.Client, i int) answer

// afterOp runs on the node's goroutine once the round is decided, with the
// node's own answer (not the collector's view: a node given up on as
// Abandoned or TimedOut may have answered since).
type afterOp func(i int, a answer, won bool)

// fanout starts op on every node, its requests bounded by timeout under
// detached, which must not carry the caller's cancellation (give
// context.WithoutCancel of it): their results are needed for cleanup.
func (c *Client) fanout(detached context.Context, timeout time.Duration, op nodeOp, after afterOp) (*round, error) {
	n := len(c.nodes)
	if !c.enter(n) {
		return nil, ErrClosed
	}
	r := &round{
		c:       c,
		op:      op,
		after:   after,
		replies: make(chan int, n),
		at:      make([]nodeAnswer, n),
	}
	r.decided.arm()
	for i := range r.at {
		r.at[i].answered.arm()
	}
	r.start = time.Now()
	deadline := r.start.Sub(epoch) + timeout
	r.ctx = roundCtx{Context: detached, deadline: r.start.Add(timeout), done: c.deadlines.done(deadline)}
	for i := range c.nodes {
		c.workers.start(r, i)
	}
	return r, nil
}

func (r *round) run(i int) {
	defer r.c.wg.Done()
	a := r.op(&r.ctx, r.c.nodes[i], i)
	a.at = time.Since(r.start)
	r.c.heardFrom(i, a.err)
	if a.err != nil {
		a.outcome = classify(a.err)
	}
	r.at[i].answer = a
	r.at[i].answered.open()
	r.replies <- i
	if r.after != nil {
		r.decided.wait()
		r.after(i, a, r.won)
	}
}

func classify(err error) Outcome {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return TimedOut
	}
	return Failed
}

// unknown reports whether a request that failed with err may still have
// run, or may run later, on the node. A Redis error reply is a definite
// answer (the command did not run); a failed dial or TLS handshake (ConnError), a wait for a pooled
// connection that ran out and a closed client sent nothing. Anything else
// (a timeout, a connection that broke after the write) leaves the outcome
// unknown: a stalled server may still have the request queued.
func unknown(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		return false
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return false
	}
	var ce *ConnError
	if errors.As(err, &ce) {
		return false // the connection failed before any command ran
	}
	return !errors.Is(err, redis.ErrPoolTimeout) && !errors.Is(err, redis.ErrClosed)
}

// tally is what the collector knew when it stopped.
type tally struct {
	yes, no, failed int
	restored        int // of the yes votes, keys set again by extend
	nodes           []NodeResult
	ctxErr          error // the caller's context ended first
}

// collect reads replies until all nodes answered or, when early is set, until
// a quorum voted yes or can no longer be reached. Nodes still silent at the
// request deadline count as TimedOut (failed); nodes still silent when the
// decision is made are Abandoned. The caller must call decide afterwards.
func (r *round) collect(ctx context.Context, quorum int, early bool) tally {
	n := len(r.c.nodes)
	t := tally{nodes: make([]NodeResult, n)}
	for i := range t.nodes {
		t.nodes[i] = NodeResult{Node: i, Addr: r.c.addrs[i]}
	}
	answered := 0
	record := func(i int) {
		answered++
		rep := r.at[i].answer
		t.nodes[i].Outcome = rep.outcome
		t.nodes[i].Latency = rep.at
		t.nodes[i].Err = rep.err
		t.nodes[i].Restored = rep.restored
		switch rep.outcome {
		case Granted:
			t.yes++
			if rep.restored {
				t.restored++
			}
		case Taken:
			t.no++
		default:
			t.failed++
		}
	}
	drain := func() {
		for answered < n {
			select {
			case i := <-r.replies:
				record(i)
			default:
				return
			}
		}
	}
	giveUp := func(o Outcome) {
		drain()
		at := time.Since(r.start)
		for i := range t.nodes {
			if t.nodes[i].Outcome == 0 {
				t.nodes[i].Outcome, t.nodes[i].Latency = o, at
				if o == TimedOut {
					t.nodes[i].Err = context.DeadlineExceeded
					t.failed++
				}
			}
		}
	}
	for answered < n {
		if early && (t.yes >= quorum || t.no+t.failed > n-quorum) {
			break
		}
		select {
		case i := <-r.replies:
			record(i)
		case <-r.ctx.done:
			giveUp(TimedOut)
			return t
		case <-ctx.Done():
			t.ctxErr = ctx.Err()
			giveUp(Abandoned)
			return t
		}
	}
	giveUp(Abandoned)
	return t
}

// decide publishes the decision to the node goroutines still running.
func (r *round) decide(won bool) {
	r.won = won
	r.decided.open()
}

// event builds the Event of a decided round.
func (r *round) event(op Op, key string, attempt, quorum int, t tally, err error) Event {
	return Event{
		Op:       op,
		Key:      key,
		Attempt:  attempt,
		Quorum:   quorum,
		Votes:    t.yes,
		Restored: t.restored,
		Start:    r.start,
		Elapsed:  time.Since(r.start),
		Nodes:    t.nodes,
		Err:      err,
	}
}

func (c *Client) observe(e Event) {
	if c.cfg.observer != nil {
		c.cfg.observer.Observe(e)
	}
}

// observeAcquire reports a finished Acquire or TryAcquire that started at
// start to an AcquireObserver.
func (c *Client) observeAcquire(key string, ttl time.Duration, start time.Time, l *Lock, err error) {
	o, ok := c.cfg.observer.(AcquireObserver)
	if !ok {
		return
	}
	r := AcquireResult{Key: key, TTL: ttl, Elapsed: time.Since(start), Err: err}
	var ae *AttemptError
	switch {
	case l != nil:
		r.Attempts, r.Validity = l.attempts, l.Validity()
	case errors.As(err, &ae):
		r.Attempts = ae.Attempts
	}
	o.ObserveAcquire(r)
}

// verdict names why a round that did not win lost.
func (c *Client) verdict(t tally, notHeld error) error {
	if t.ctxErr != nil {
		return t.ctxErr
	}
	if t.no >= len(c.nodes)-c.quorum+1 {
		return notHeld
	}
	return ErrUnavailable
}

// grant settles a round that sets or renews the key for ttl: with a quorum of
// yes votes (and the caller's context alive) the new deadline, measured from
// the round's start less the drift allowance, and the validity left of it
// (ErrValidityExhausted when none is); otherwise the verdict, with notHeld
// for a quorum of no votes.
func (r *round) grant(t tally, ttl time.Duration, notHeld error) (deadline, validity time.Duration, err error) {
	c := r.c
	if t.ctxErr != nil || t.yes < c.quorum {
		return 0, 0, c.verdict(t, notHeld)
	}
	deadline = r.start.Sub(epoch) + ttl - c.cfg.drift(ttl)
	validity = deadline - time.Since(epoch)
	if validity <= 0 {
		return deadline, validity, ErrValidityExhausted
	}
	return deadline, validity, nil
}

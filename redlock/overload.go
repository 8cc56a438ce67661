package redlock

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Overload control keeps a Client from collapsing when its nodes slow down,
// with no tuning. Without it, an open-loop load past the nodes' capacity is
// metastable: requests queue on the nodes, attempts time out, every timeout
// is retried and leaves a cleanup release behind, and the extra requests
// make the next attempts time out too. Goodput falls to a fraction of what
// the nodes can do and does not come back while the load stays on. Three
// mechanisms break the loop, after the SRE book's client-side throttling,
// Netflix's concurrency-limits and gRPC's retry throttling:
//
//   - An adaptive limit on the acquire attempts in flight (AIMD, as TCP's
//     congestion window). An attempt whose round ran into its request
//     timeout on a node that is alive, waited for a pooled connection in
//     vain, or took longer than half the request timeout to decide signals
//     congestion and halves the limit (once per round trip: attempts
//     admitted before the last cut do not cut again). A round decided in
//     time raises it: by one per success back up to the starting limit,
//     and above it by one per limit's worth of successes while the attempts
//     in flight use at least half of it. The fast growth (TCP's slow
//     start) goes up to what the node clients' connection pools carry in
//     flight, the smallest pool size: the limit starts at initialLimit (or
//     that, when smaller) and reaches it within a few round trips unless
//     congestion shows first. A Release's round counts among the attempts
//     in flight without waiting for a place (see enterRelease), so that
//     acquires and the releases that follow them do not together put twice
//     the limit on the nodes.
//   - Admission that waits (as Netflix's blocking limiter does). An attempt
//     that finds the limit reached, or others already waiting, queues in
//     arrival order without sending anything, and is admitted as soon as an
//     attempt in flight is decided and the limit has room. It waits for as
//     long as its round could still finish before the caller's context
//     ends: until the context's deadline (or, without one, ttl from the
//     start of the wait) less the request timeout. Only then does it fail
//     with ErrOverloaded, its Event marked Overloaded, and Acquire backs off
//     (the Client's Backoff) before it tries again while its context lasts.
//     So a closed loop of callers, however many, is slowed to the pace the
//     nodes keep and never turned away: while the nodes keep up, a healthy
//     Client never fails an attempt with ErrOverloaded. An open-loop load
//     past capacity queues instead of reaching the nodes, and the calls
//     that cannot be served before their deadlines fail at the client;
//     queueing at the client is cheap, queueing on the nodes is what turns
//     into timeouts, retries and cleanups. A caller that spins on
//     ErrOverloaded cannot starve the nodes either: it spins only once its
//     own deadline is that close, and then through the Backoff.
//   - A retry budget: Acquire retries an attempt that failed for want of
//     nodes (ErrUnavailable, ErrValidityExhausted) only while the budget
//     has a token. Every call's first attempt adds DefaultRetryRatio of a
//     token, every such retry takes one, and the budget holds at most
//     DefaultRetryBurst, so these retries never exceed DefaultRetryBurst
//     plus DefaultRetryRatio of the first attempts. A call whose retry the
//     budget refuses ends with its last attempt's error. Retries after
//     ErrContended are not counted: a quorum answered, the lock is simply
//     held, and waiting for it is what Acquire is for.
//
// The circuit breaker and the limiter read the same timeouts and must not
// fight: a saturated CPU makes nodes time out too, and a breaker that took
// that for a lost quorum would cut the Client off for a cooldown at the
// moment the limiter is bringing the load back within capacity. So each
// round's nodes are told apart: a node that timed out (or whose pooled
// connection never came) counts as down, for the breaker, when another node
// of the same round answered promptly (within half the request timeout:
// the network or that process is the problem, as in a partition, a crash or
// a frozen node), or when it has answered nothing at all, to any request of
// this Client, for silentAfter (ten request timeouts, at least a second);
// otherwise its timeout is congestion, for the limiter. The prompt answer
// does not count when the attempt had to queue for its place: a Client that
// busy is saturated itself, its CPU serves some replies at once and others
// only past the timeout, and a breaker opened on that failed every call at
// once, which callers in a loop turned into a spin. A refused connection or
// an error reply is down at once. A majority partition thus reaches the
// breaker within a few attempts on a Client that is not queueing, and
// within silentAfter on one that is, while a saturated node set, slow
// everywhere, reaches the limiter; only one that answers nothing at all for
// silentAfter reaches the breaker too, which is then the right call.
//
// WithOverloadControl switches all of it off, WithMaxConcurrentAttempts
// replaces the adaptive limit by a fixed one and WithRetryBudget sets the
// budget; the constants below are the defaults.
const (
	// DefaultRetryRatio is the share of a token each call's first attempt
	// adds to the retry budget.
	DefaultRetryRatio = 0.2
	// DefaultRetryBurst is the most the retry budget holds, and what it
	// starts with: a client that just started, or has been healthy for a
	// while, can retry this many failed attempts in a row.
	DefaultRetryBurst = 10

	// initialLimit is where the adaptive limit starts (the pools' capacity
	// when smaller, see poolLimit), as TCP's initial window: from there it
	// grows by one per success, doubling every round trip, up to what the
	// pools carry. Starting at the pools' capacity itself sends a burst of
	// that many attempts, every one needing a new connection, before any
	// round could show congestion; on two cores, 256 of them at once time
	// out on the dials alone.
	initialLimit = 32
	minLimit     = 1
	maxLimit     = 4096
	// cutRatio is the multiplicative decrease.
	cutRatio = 0.5
	// regrowAfter is how long after the last cut the limit may grow back
	// to where it started quickly again (by one per success rather than one
	// per limit's worth): the overload that caused the cut has passed.
	regrowAfter = time.Second
)

// poolLimit is how many acquire attempts the node clients' connection
// pools carry in flight at once: each attempt takes one connection per
// node, so the smallest pool size. The adaptive limit grows to it fast; an
// attempt admitted past it would only wait inside go-redis for a
// connection, where its wait is short (PoolTimeout) and counts against it.
func poolLimit(nodes []*redis.Client) int {
	pool := 0
	for i, n := range nodes {
		if p := n.Options().PoolSize; i == 0 || p < pool {
			pool = p
		}
	}
	return pool
}

// signal is what a decided acquire round says about the nodes' load.
type signal uint8

const (
	signalNone      signal = iota // says nothing (the caller's context ended, nodes down)
	signalOK                      // a quorum answered in time
	signalCongested               // timeouts on live nodes, pool waits, or a slow decision
)

// limiter bounds the acquire attempts in flight, adaptively (AIMD) or at a
// fixed number (WithMaxConcurrentAttempts), and queues the attempts over the
// bound in arrival order until a place is free.
type limiter struct {
	mu       sync.Mutex
	fixed    bool    // the limit never moves: signals change nothing
	ceiling  float64 // what the limit grows to fast (slow start), and regrows to after a cut
	limit    float64
	ssthresh float64 // below it, the limit grows by one per success
	inflight int
	lastCut  time.Time
	queue    list.List // of *waiter, oldest first
}

// waiter is an attempt queued for a place.
type waiter struct {
	ready    chan struct{} // closed once admitted
	admitted bool          // under the limiter's mu
	limit    int           // the limit it was admitted under
}

// newLimiter returns a limiter of n attempts in flight when fixed is set;
// otherwise an adaptive one that starts at initialLimit (n when smaller)
// and grows by one per success up to n unless congestion shows first.
func newLimiter(n int, fixed bool) *limiter {
	ceiling := float64(max(n, minLimit))
	l := &limiter{fixed: fixed, ceiling: ceiling, limit: ceiling, ssthresh: ceiling}
	if !fixed {
		l.limit = min(ceiling, initialLimit)
	}
	return l
}

// tryAcquire admits an attempt when fewer than the limit are in flight and
// none is queued before it, and returns the limit it was judged against.
func (l *limiter) tryAcquire() (ok bool, limit int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.admitNow()
}

func (l *limiter) admitNow() (bool, int) {
	lim := int(l.limit)
	if l.queue.Len() > 0 || l.inflight >= lim {
		return false, lim
	}
	l.inflight++
	return true, lim
}

// acquire admits an attempt as tryAcquire does, or else queues it behind
// the attempts already waiting until a place is free for it. It gives up
// with ErrOverloaded once until has passed (the zero time: never), with
// ctx's error when ctx ends first, and with ErrClosed when done is closed.
// It returns the limit it was judged against, and whether it had to queue.
func (l *limiter) acquire(ctx context.Context, until time.Time, done <-chan struct{}) (limit int, queued bool, err error) {
	l.mu.Lock()
	if ok, lim := l.admitNow(); ok {
		l.mu.Unlock()
		return lim, false, nil
	}
	var expired <-chan time.Time
	if !until.IsZero() {
		wait := time.Until(until)
		if wait <= 0 {
			lim := int(l.limit)
			l.mu.Unlock()
			return lim, true, ErrOverloaded
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		expired = t.C
	}
	w := &waiter{ready: make(chan struct{})}
	e := l.queue.PushBack(w)
	l.mu.Unlock()

	select {
	case <-w.ready:
		return w.limit, true, nil
	case <-expired:
		err = ErrOverloaded
	case <-ctx.Done():
		err = ctx.Err()
	case <-done:
		err = ErrClosed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !w.admitted:
		l.queue.Remove(e)
		return int(l.limit), true, err
	case errors.Is(err, ErrOverloaded):
		// Admitted as the wait ran out: the place is still worth using.
		return w.limit, true, nil
	}
	// Admitted as the caller's context ended or the Client closed: the
	// place goes to the next in line.
	l.inflight--
	l.handOff()
	return w.limit, true, err
}

// enter counts work in flight that does not wait for a place.
func (l *limiter) enter() {
	l.mu.Lock()
	l.inflight++
	l.mu.Unlock()
}

// handOff admits queued attempts, oldest first, while the limit has room.
func (l *limiter) handOff() {
	for l.queue.Len() > 0 && l.inflight < int(l.limit) {
		w := l.queue.Remove(l.queue.Front()).(*waiter)
		l.inflight++
		w.admitted, w.limit = true, int(l.limit)
		close(w.ready)
	}
}

// release ends an attempt admitted at start, with what its round signalled,
// and admits the attempts queued behind it that the limit now has room for.
func (l *limiter) release(start time.Time, sig signal, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	used := l.inflight
	l.inflight--
	defer l.handOff()
	if l.fixed {
		return
	}
	switch sig {
	case signalCongested:
		if start.After(l.lastCut) {
			l.limit = max(minLimit, l.limit*cutRatio)
			l.ssthresh = l.limit
			l.lastCut = now
		}
	case signalOK:
		if now.Sub(l.lastCut) > regrowAfter {
			l.ssthresh = max(l.ssthresh, l.ceiling)
		}
		switch {
		case l.limit < l.ssthresh:
			l.limit = min(l.limit+1, l.ssthresh)
		case float64(used) >= l.limit/2:
			// Above the fast-regrowth mark only when the attempts in
			// flight use the limit: an idle Client must not talk
			// itself into an unbounded one.
			l.limit = min(maxLimit, l.limit+1/l.limit)
		}
	}
}

// current returns the limit now.
func (l *limiter) current() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.limit)
}

// waiting returns how many attempts are queued.
func (l *limiter) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queue.Len()
}

// retryBudget bounds the retries of attempts that failed for want of nodes
// to a share of first attempts (a token bucket).
type retryBudget struct {
	mu     sync.Mutex
	ratio  float64
	burst  float64
	tokens float64
}

func newRetryBudget(ratio float64, burst int) *retryBudget {
	return &retryBudget{ratio: ratio, burst: float64(burst), tokens: float64(burst)}
}

// deposit credits one call's first attempt.
func (b *retryBudget) deposit() {
	b.mu.Lock()
	b.tokens = min(b.burst, b.tokens+b.ratio)
	b.mu.Unlock()
}

// withdraw takes a token for a retry; false when there is none.
func (b *retryBudget) withdraw() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// admission is an acquire attempt's place in the concurrency bound.
type admission struct {
	at    time.Time // when it was admitted
	limit int       // the limit it was judged against; 0: no bound
	held  bool      // a place in the limiter is held
	// queued: the limit was full when the attempt came, so the Client is
	// as busy as the limit lets it be (see assess).
	queued bool
}

// admit takes a place in the limiter for an acquire attempt of ttl, waiting
// in line for one when the limit is reached. Under the fixed bound
// (WithMaxConcurrentAttempts) it waits for as long as ctx lasts; under the
// adaptive limit it waits until the attempt could no longer finish its round
// before ctx's deadline (or, for a context without one, ttl from now) and
// then fails with ErrOverloaded. It returns ctx's error when the context
// ends first, or ErrClosed when the Client is closed while waiting. A held
// admission must be given back with leave once its round is decided.
func (c *Client) admit(ctx context.Context, ttl time.Duration) (admission, error) {
	if c.limit == nil {
		return admission{at: time.Now()}, nil
	}
	var until time.Time
	if !c.limit.fixed {
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(ttl)
		}
		until = deadline.Add(-min(c.timeout, ttl))
	}
	lim, queued, err := c.limit.acquire(ctx, until, c.done)
	if err != nil {
		return admission{limit: lim}, err
	}
	return admission{at: time.Now(), limit: lim, held: true, queued: queued}, nil
}

// leave gives back what admit took, with what the attempt's round said.
func (c *Client) leave(adm *admission, sig signal) {
	if !adm.held {
		return
	}
	adm.held = false
	c.limit.release(adm.at, sig, time.Now())
}

// enterRelease counts a Release's round among the work in flight of the
// adaptive limit, without waiting for a place: a release frees a key that
// others may wait for, and must not queue behind them. It still takes its
// share of the nodes' and the Client's capacity, so while it is in flight,
// one acquire attempt fewer is admitted. It returns when it entered (zero
// when not counted), for leaveRelease.
func (c *Client) enterRelease() time.Time {
	if c.limit == nil || c.limit.fixed {
		return time.Time{}
	}
	c.limit.enter()
	return time.Now()
}

// leaveRelease ends what enterRelease counted, for a round that took
// elapsed to decide: one slower than half the request timeout signals
// congestion, as a slow acquire round does; a prompt one says nothing (the
// limit grows on acquire successes only).
func (c *Client) leaveRelease(at time.Time, elapsed time.Duration) {
	if at.IsZero() {
		return
	}
	sig := signalNone
	if elapsed > c.timeout/2 {
		sig = signalCongested
	}
	c.limit.release(at, sig, time.Now())
}

// overloaded reports an attempt that found no place in the limiter in time
// and returns its Event.
func (c *Client) overloaded(key string, ttl time.Duration, n, limit int, state BreakerState) Event {
	ev := Event{
		Op:         OpAcquire,
		Key:        key,
		Attempt:    n,
		Quorum:     c.quorum,
		TTL:        ttl,
		Start:      time.Now(),
		Err:        ErrOverloaded,
		Breaker:    state,
		Overloaded: true,
		Limit:      limit,
	}
	c.observe(ev)
	return ev
}

// heardFrom records that node i answered (a reply, even an error reply).
func (c *Client) heardFrom(i int, err error) {
	if err == nil || isReply(err) {
		c.heard[i].Store(int64(time.Since(epoch)))
	}
}

// isReply reports whether err is an error reply from Redis: the node
// answered.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// silent reports whether node i has answered nothing for silentAfter.
func (c *Client) silent(i int) bool {
	return time.Since(epoch)-time.Duration(c.heard[i].Load()) > c.silentAfter
}

// assess reads a decided acquire round for the limiter and the breaker:
// whether the nodes were congested, whether a quorum answered, and the
// nodes' part in it as the breaker should count them (see below).
//
// A node that did not answer in time is down when another node of the same
// round answered promptly (the network or the process is the problem, not
// the load: a partition, a crash, a frozen node), or when it has answered
// nothing at all for silentAfter; otherwise it is congested. A saturated node
// set is slow everywhere, so no prompt answer sets it apart. Neither does a
// busy Client (busy: the attempt found the limit full): its own CPU
// serves some replies at once and others only after the timeout, so a
// prompt answer beside a timeout says nothing about the late node there,
// and only silence counts it down. The breaker counts a node's failures in
// a row: it is given the nodes that answered and those found down, not the
// congested ones, so that a saturated node set, or a saturated Client,
// shrinks the limit without counting its nodes out. Those are appended to
// counted (the caller's buffer: the breaker only reads them, so a healthy
// attempt allocates nothing for them).
func (c *Client) assess(t tally, err error, elapsed time.Duration, busy bool, counted []NodeResult) (signal, quorumHealth, []NodeResult) {
	if t.ctxErr != nil {
		return signalNone, quorumUnknown, nil
	}
	slow := c.timeout / 2
	prompt := false
	for _, nr := range t.nodes {
		if busy {
			break
		}
		if (nr.Outcome == Granted || nr.Outcome == Taken || (nr.Outcome == Failed && isReply(nr.Err))) && nr.Latency <= slow {
			prompt = true
		}
	}
	congested := elapsed > slow
	down := 0
	for i, nr := range t.nodes {
		late := false
		switch nr.Outcome {
		case Granted, Taken:
			counted = append(counted, nr)
		case Failed:
			if !errors.Is(nr.Err, redis.ErrPoolTimeout) {
				down++
				counted = append(counted, nr)
				continue
			}
			late = true
		case TimedOut:
			late = true
		case Abandoned:
			// Given up on when the round was decided: down only if it
			// has been silent long, and no sign of congestion either way.
			if c.silent(i) {
				down++
			}
		}
		if late {
			if prompt || c.silent(i) {
				down++
				counted = append(counted, nr)
			} else {
				congested = true
			}
		}
	}
	health := quorumUp
	if errors.Is(err, ErrUnavailable) {
		health = quorumDown
		if len(t.nodes)-down >= c.quorum {
			// Enough nodes alive for a quorum, only too slow: the
			// limiter's business, not the breaker's.
			health = quorumUnknown
		}
	}
	switch {
	case congested:
		return signalCongested, health, counted
	case health == quorumUp:
		return signalOK, health, counted
	}
	return signalNone, health, counted
}

package redlock

import (
	"strconv"
	"sync"
	"time"
)

// BreakerState is the state of a Client's circuit breaker, as reported in
// Event.Breaker. The zero value means no state: the breaker is off, or the
// Event is not an acquire attempt.
//
// The circuit breaker stops a Client from sending acquire attempts that
// cannot succeed. It counts, per node, the requests in a row that failed or
// timed out; a node with DefaultBreakerThreshold of them (see
// WithBreakerPolicy) is down, and any answer from the node, granted or
// taken, resets its count. The breaker opens when an attempt found too few
// nodes answering for a quorum (ErrUnavailable) while more nodes are down
// than the quorum can spare (three of five). Acquire, TryAcquire and Do then
// fail at once, without sending anything, with an error that wraps
// ErrCircuitOpen and ErrUnavailable, instead of retrying until their context
// ends; Release and Extend are never refused. Once DefaultBreakerCooldown
// has passed, the next attempt goes to the nodes as the probe (half-open)
// while the others are still refused; the probe closes the breaker when a
// quorum answers it, granted or contended, and reopens it otherwise. Any
// attempt that finds a quorum answering closes it, and contention never
// opens it.
//
// Counting per node is what keeps a minority outage from tripping it: with
// two of five nodes cut off, every attempt needs all three others, and one
// of them timing out once (a busy machine) fails the attempt but does not
// make that node down, so the breaker stays closed and the caller retries;
// with three of five cut off, three nodes are down and it opens. A timeout
// on a node set that is slow everywhere is congestion, for the overload
// control, not a failed request here: how a round's timeouts are told apart
// is documented with DefaultRetryRatio.
//
// Every acquire Event carries the breaker's state (Event.Breaker), and marks
// refused attempts (Rejected), probes (Probe) and the attempts that changed
// the state (BreakerChanged).
type BreakerState uint8

// Circuit breaker states.
const (
	// BreakerClosed: acquire attempts go to the nodes.
	BreakerClosed BreakerState = iota + 1
	// BreakerOpen: the last attempts found no quorum of nodes answering;
	// attempts are refused without sending anything until the cooldown
	// has passed.
	BreakerOpen
	// BreakerHalfOpen: the cooldown has passed and one attempt, the probe,
	// goes to the nodes; the others are refused until it is decided.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return "breaker(" + strconv.Itoa(int(s)) + ")"
}

// pass is the breaker's admission of one attempt.
type pass uint8

const (
	passNormal   pass = iota // closed: go ahead
	passProbe                // the half-open probe: go ahead, and report how it went
	passRejected             // refused: send nothing
)

// quorumHealth is what a decided attempt says about the quorum.
type quorumHealth uint8

const (
	// quorumUnknown: the attempt says nothing (the caller's context ended,
	// or it never started).
	quorumUnknown quorumHealth = iota
	// quorumUp: a quorum of nodes answered (granted, contended, or granted
	// too late): whatever the outcome, the nodes are reachable.
	quorumUp
	// quorumDown: too many nodes failed or timed out (ErrUnavailable).
	quorumDown
)

// breaker is the circuit breaker that BreakerState describes.
type breaker struct {
	threshold int
	quorum    int
	cooldown  time.Duration
	now       func() time.Time

	mu       sync.Mutex
	state    BreakerState
	fails    []int     // per node: requests in a row that failed or timed out
	openedAt time.Time // when the breaker last opened
	probing  bool      // half-open: the probe is out
}

func newBreaker(threshold int, cooldown time.Duration, nodes, quorum int, now func() time.Time) *breaker {
	return &breaker{threshold: threshold, quorum: quorum, cooldown: cooldown, now: now, state: BreakerClosed, fails: make([]int, nodes)}
}

// admit decides whether an attempt may go to the nodes and returns the state
// it saw (after moving from open to half-open when the cooldown is over).
// Every passNormal and passProbe must be followed by one call to done.
func (b *breaker) admit() (pass, BreakerState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return passNormal, b.state
	case BreakerOpen:
		if b.now().Sub(b.openedAt) < b.cooldown {
			return passRejected, b.state
		}
		b.state = BreakerHalfOpen
	}
	if b.probing {
		return passRejected, b.state
	}
	b.probing = true
	return passProbe, b.state
}

// done records how an admitted attempt went (h, and each node's part in
// it) and returns the breaker's state afterwards, and whether this attempt
// changed it.
func (b *breaker) done(p pass, h quorumHealth, nodes []NodeResult) (state BreakerState, changed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	before := b.state
	if p == passProbe {
		b.probing = false
	}
	for _, nr := range nodes {
		if nr.Node < 0 || nr.Node >= len(b.fails) {
			continue
		}
		switch nr.Outcome {
		case Granted, Taken:
			b.fails[nr.Node] = 0
		case Failed, TimedOut:
			b.fails[nr.Node]++
		}
	}
	switch h {
	case quorumUp:
		b.state = BreakerClosed
	case quorumDown:
		if (p == passProbe && b.state == BreakerHalfOpen) || (b.state == BreakerClosed && b.downLocked() > len(b.fails)-b.quorum) {
			b.state, b.openedAt = BreakerOpen, b.now()
		}
	}
	// quorumUnknown from a probe leaves the breaker half-open with no probe
	// out: the next attempt probes.
	return b.state, b.state != before
}

// downLocked counts the nodes with threshold failed requests in a row.
func (b *breaker) downLocked() int {
	n := 0
	for _, f := range b.fails {
		if f >= b.threshold {
			n++
		}
	}
	return n
}

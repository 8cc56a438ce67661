package redlock

import (
	"strconv"
	"sync"
	"time"
)

// BreakerState is the state of a Client's circuit breaker, as reported in
// Event.Breaker. The zero value means no state: the breaker is off, or the
// Event is not an acquire attempt.
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

// breaker stops a Client from sending acquire attempts that cannot succeed.
// After threshold consecutive attempts found the quorum unreachable it opens:
// attempts are refused at once. After cooldown the next attempt is let
// through as the probe (half-open) while the others are still refused; the
// probe closes the breaker when a quorum answered and reopens it otherwise.
// Any attempt that finds a quorum answering closes it.
type breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time

	mu       sync.Mutex
	state    BreakerState
	streak   int       // consecutive quorumDown attempts
	openedAt time.Time // when the breaker last opened
	probing  bool      // half-open: the probe is out
}

func newBreaker(threshold int, cooldown time.Duration, now func() time.Time) *breaker {
	return &breaker{threshold: threshold, cooldown: cooldown, now: now, state: BreakerClosed}
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

// done records how an admitted attempt went and returns the breaker's state
// afterwards, and whether this attempt changed it.
func (b *breaker) done(p pass, h quorumHealth) (state BreakerState, changed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	before := b.state
	if p == passProbe {
		b.probing = false
	}
	switch h {
	case quorumUp:
		b.streak = 0
		b.state = BreakerClosed
	case quorumDown:
		b.streak++
		if (p == passProbe && b.state == BreakerHalfOpen) || (b.state == BreakerClosed && b.streak >= b.threshold) {
			b.state, b.openedAt = BreakerOpen, b.now()
		}
	}
	// quorumUnknown from a probe leaves the breaker half-open with no probe
	// out: the next attempt probes.
	return b.state, b.state != before
}

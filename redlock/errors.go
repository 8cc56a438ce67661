package redlock

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors; test for them with errors.Is. Failures of lock operations
// arrive wrapped in an *AttemptError.
var (
	// ErrContended means other tokens hold the key on so many nodes that a
	// quorum could not be reached: someone else has the lock.
	ErrContended = errors.New("redlock: lock is held by another owner")
	// ErrUnavailable means too many nodes failed or timed out for a quorum.
	ErrUnavailable = errors.New("redlock: too few nodes available for a quorum")
	// ErrValidityExhausted means a quorum answered, but so late that no
	// validity was left; the keys were released again.
	ErrValidityExhausted = errors.New("redlock: quorum reached but validity exhausted")
	// ErrExpired means the lock's validity had already run out when Extend or
	// Release was called (or while Do's function ran).
	ErrExpired = errors.New("redlock: lock validity expired")
	// ErrNotHeld means Release or Extend found our token on fewer nodes than a
	// quorum: the lock was lost (expired, evicted or a node restarted).
	ErrNotHeld = errors.New("redlock: lock not held on a quorum")
	// ErrClosed is returned by operations started after Client.Close.
	ErrClosed = errors.New("redlock: client closed")
	// ErrCircuitOpen means the Client's circuit breaker refused the acquire
	// attempt without sending it: the last attempts found too few nodes
	// for a quorum (see WithCircuitBreaker). It wraps ErrUnavailable, so
	// errors.Is(err, ErrUnavailable) holds too.
	ErrCircuitOpen error = circuitOpenError{}
	// ErrOverloaded means the Client gave up on the acquire attempt
	// without sending it: it waited for a place under the adaptive limit
	// on attempts in flight, and none came while its round could still
	// finish within the caller's context, because the nodes had been
	// answering too slowly for the load (see WithOverloadControl). Shed
	// the request, or retry later.
	ErrOverloaded = errors.New("redlock: too many acquire attempts in flight for the nodes' pace (overloaded)")
)

type circuitOpenError struct{}

func (circuitOpenError) Error() string {
	return "redlock: circuit breaker open (no quorum on the last attempts)"
}

func (circuitOpenError) Unwrap() error { return ErrUnavailable }

// AttemptError is the error of a failed lock operation. It wraps the sentinel
// that describes the last attempt (ErrContended, ErrUnavailable, …) and, when
// the context ended the operation, the context's error too.
type AttemptError struct {
	// Attempts is how many attempts were sent to the nodes (0 when refused
	// before the first one, e.g. Extend after expiry, a context that was
	// already done, or an open circuit breaker).
	Attempts int
	// Last holds the facts of the last attempt sent, including per-node
	// outcomes, or of the refusal when none was sent.
	Last Event

	errs []error
}

func newAttemptError(attempts int, last Event, errs ...error) *AttemptError {
	e := &AttemptError{Attempts: attempts, Last: last}
	for _, err := range errs {
		if err != nil && !contains(e.errs, err) {
			e.errs = append(e.errs, err)
		}
	}
	return e
}

func contains(errs []error, err error) bool {
	for _, e := range errs {
		if e == err {
			return true
		}
	}
	return false
}

// Unwrap returns the wrapped sentinel and context errors.
func (e *AttemptError) Unwrap() []error { return e.errs }

// Error describes the operation, the attempts and the last attempt's votes.
func (e *AttemptError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redlock: %s %q failed after %d attempt", e.Last.Op, e.Last.Key, e.Attempts)
	if e.Attempts != 1 {
		b.WriteByte('s')
	}
	if len(e.Last.Nodes) > 0 {
		var count [outcomeCount]int
		for _, n := range e.Last.Nodes {
			count[n.Outcome]++
		}
		fmt.Fprintf(&b, " (last: %d/%d votes, quorum %d;", e.Last.Votes, len(e.Last.Nodes), e.Last.Quorum)
		for o := Granted; o < outcomeCount; o++ {
			if count[o] > 0 {
				fmt.Fprintf(&b, " %s=%d", o, count[o])
			}
		}
		b.WriteByte(')')
	}
	for _, err := range e.errs {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(err.Error(), "redlock: "))
	}
	return b.String()
}

package redlock

import (
	"strconv"
	"time"
)

// Observer receives one Event per acquire attempt (including attempts the
// circuit breaker refused, marked Rejected), release and extend. It is
// called synchronously on the caller's goroutine right after the decision,
// so it must be fast and safe for concurrent use (update counters, record a
// histogram; do no I/O).
type Observer interface {
	Observe(Event)
}

// AcquireObserver is an Observer that also wants one AcquireResult per
// Acquire or TryAcquire call, once the call returns: an attempt's Event
// cannot tell whether a retry follows, so how many attempts a lock took in
// all, and how long it took with the backoffs, is only known here. It is
// called like Observe: synchronously, so it must be fast.
type AcquireObserver interface {
	Observer
	ObserveAcquire(AcquireResult)
}

// AcquireResult sums up one Acquire or TryAcquire call.
type AcquireResult struct {
	// Key and TTL are the call's arguments.
	Key string
	TTL time.Duration
	// Attempts is how many attempts were sent to the nodes (0 when none
	// was: the circuit breaker refused the first, or the context ended or
	// the Client closed before it).
	Attempts int
	// Elapsed is the whole call, backoffs included (monotonic clock).
	Elapsed time.Duration
	// Validity is the granted lock's validity left when the call returned;
	// 0 on failure.
	Validity time.Duration
	// Err is nil when the lock was granted, else the call's error.
	Err error
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

var _ Observer = ObserverFunc(nil)

// Observers returns an Observer that hands every Event to each of obs in
// order, and every AcquireResult to those of them that are
// AcquireObservers. Nil entries are skipped; with none left it returns nil,
// with one, that one.
func Observers(obs ...Observer) Observer {
	var list multiObserver
	for _, o := range obs {
		if o != nil {
			list = append(list, o)
		}
	}
	switch len(list) {
	case 0:
		return nil
	case 1:
		return list[0]
	}
	return list
}

type multiObserver []Observer

var _ AcquireObserver = multiObserver(nil)

func (m multiObserver) Observe(e Event) {
	for _, o := range m {
		o.Observe(e)
	}
}

func (m multiObserver) ObserveAcquire(r AcquireResult) {
	for _, o := range m {
		if a, ok := o.(AcquireObserver); ok {
			a.ObserveAcquire(r)
		}
	}
}

// Op names the operation an Event describes.
type Op uint8

// Operations reported to an Observer.
const (
	OpAcquire Op = iota + 1
	OpRelease
	OpExtend
)

// String returns "acquire", "release" or "extend".
func (o Op) String() string {
	switch o {
	case OpAcquire:
		return "acquire"
	case OpRelease:
		return "release"
	case OpExtend:
		return "extend"
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Outcome is one node's part in an attempt.
//
// For acquire, Granted means SET NX answered OK and Taken means the key
// already existed. For release and extend, Granted means the script found our
// token and deleted or extended the key, Taken means our token was not there.
type Outcome uint8

// Node outcomes. The zero value is not an outcome.
const (
	// Granted: the node voted for us.
	Granted Outcome = iota + 1
	// Taken: the node answered, but another token (or none) holds the key.
	Taken
	// Failed: the node answered with an error, or the connection failed.
	Failed
	// TimedOut: the node did not answer within the per-node timeout.
	TimedOut
	// Abandoned: the decision was made before the node answered; its late
	// answer is handled in the background (released when we lost).
	Abandoned

	outcomeCount
)

// String returns "granted", "taken", "error", "timeout" or "abandoned".
func (o Outcome) String() string {
	switch o {
	case Granted:
		return "granted"
	case Taken:
		return "taken"
	case Failed:
		return "error"
	case TimedOut:
		return "timeout"
	case Abandoned:
		return "abandoned"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Event holds the facts of one attempt, for metrics and tracing.
type Event struct {
	// Op is the operation.
	Op Op
	// Key is the lock key.
	Key string
	// Attempt is the 1-based attempt number within Acquire (1 for the others).
	Attempt int
	// Quorum is the number of votes needed.
	Quorum int
	// Votes is the number of nodes that answered Granted by the decision.
	Votes int
	// Restored is, for extend, how many of the Votes came from nodes where
	// the key was missing (a node that restarted without its data) and our
	// token was set again; 0 otherwise.
	Restored int
	// TTL is the TTL the attempt set or extended the key for; 0 for
	// release.
	TTL time.Duration
	// Start is when the attempt began.
	Start time.Time
	// Elapsed is the time from Start to the decision (monotonic clock).
	Elapsed time.Duration
	// Validity is the time left on the lock at the decision, for a granted
	// acquire or a successful extend; 0 otherwise.
	Validity time.Duration
	// Nodes has one entry per node, in the Client's node order.
	Nodes []NodeResult
	// Err is nil on success, else the sentinel (ErrContended, …) or the
	// context's error that ended the attempt.
	Err error

	// Breaker is, for acquire attempts, the state of the Client's circuit
	// breaker once the attempt was decided (see WithCircuitBreaker); zero
	// when the breaker is off and for release and extend.
	Breaker BreakerState
	// BreakerChanged reports that this attempt moved the breaker into
	// Breaker: the attempt that opened it, or a probe (or any attempt that
	// found a quorum) that closed it, or a probe that reopened it.
	BreakerChanged bool
	// Rejected reports that the breaker refused the attempt: nothing was
	// sent, Nodes is empty and Err is ErrCircuitOpen.
	Rejected bool
	// Probe reports that the attempt was the one the half-open breaker let
	// through to find out whether a quorum answers again.
	Probe bool

	// Overloaded reports that the attempt found no place under the
	// Client's concurrency limit in time (see WithOverloadControl):
	// nothing was sent, Nodes is empty and Err is ErrOverloaded.
	Overloaded bool
	// Limit is, for acquire attempts, the Client's bound on attempts in
	// flight that this one was admitted under or turned away by: the
	// adaptive limit, or WithMaxConcurrentAttempts' fixed bound; 0 when
	// there is none, and for release and extend.
	Limit int
}

// NodeResult is one node's outcome and latency within an attempt.
type NodeResult struct {
	// Node is the 0-based index of the node in the Client.
	Node int
	// Addr is the node's address as configured in its go-redis client.
	Addr string
	// Outcome is the node's vote.
	Outcome Outcome
	// Latency is the time from the attempt's start to the node's answer; for
	// TimedOut and Abandoned nodes, to the moment they were given up on.
	Latency time.Duration
	// Err is the node's error for Failed and TimedOut outcomes.
	Err error
	// Restored reports, for extend, that the key was missing on the node and
	// our token was set again (a Granted vote).
	Restored bool
}

// Package redlock implements the Redlock distributed lock over N independent
// Redis masters, on go-redis.
//
// An acquire attempt sends SET key token NX PX ttl to every node in parallel,
// each request bounded by a short per-node timeout, and decides as soon as a
// quorum (N/2+1) granted or a quorum can no longer be reached; it never waits
// for a slow node after the decision. The lock is granted only when a quorum
// granted and the validity left, ttl − elapsed − (ttl·drift + fixed drift),
// is still positive, elapsed being measured on the monotonic clock. Release
// and Extend are Lua compare-and-delete and compare-and-pexpire on every node
// in parallel; Extend also sets the key again (SET NX) on a node where it is
// missing, such as a node that restarted without its data, so that a holder
// that keeps extending does not lose its majority one restart at a time.
//
// # Cleanup of failed attempts and releases
//
// A failed attempt releases the key, in the background, on every node that
// may hold it, including nodes whose SET timed out (it may have run on the
// server, or still be queued on a stalled one). A release whose outcome on a
// node is unknown is retried on that node with backoff until the node
// answers or the key's TTL has passed, so that a SET queued on a stalled
// node does not hold the key, owned by nobody, once the node resumes;
// Lock.Release does the same for the nodes that did not answer it. A node
// stalled for longer than the TTL can still run a queued SET after the
// retries have stopped, and Client.Close ends the retries after one last
// try. The rules are in settle.go.
//
// # Circuit breaker
//
// While too many nodes are down for a quorum, the Client's circuit breaker
// makes Acquire, TryAcquire and Do fail at once with an error that wraps
// ErrCircuitOpen and ErrUnavailable, instead of retrying until their context
// ends. It counts failed requests per node, so a minority of nodes down never
// opens it, and contention never does. BreakerState describes how it opens,
// probes and closes; WithCircuitBreaker and WithBreakerPolicy switch it off
// and tune it.
//
// # Overload
//
// Past its nodes' capacity a Client restrains itself, with no tuning: an
// adaptive limit on its acquire attempts in flight makes attempts wait for a
// place, without sending anything, and fail with ErrOverloaded only when
// none comes while their round could still finish in time; a retry budget
// bounds the retries of attempts that found too few nodes. How it works, and
// how it tells congestion from nodes that are down, is documented with
// DefaultRetryRatio and DefaultRetryBurst (overload.go).
// WithOverloadControl, WithMaxConcurrentAttempts and WithRetryBudget change
// it.
//
// # What a Redlock token does not guarantee
//
// A token is 128 random bits. It identifies the holder so that release and
// extend never touch another holder's key, and nothing more:
//
//   - Tokens are not ordered. A storage system cannot tell an old holder from
//     a new one by comparing tokens, so a token is not a fencing token.
//   - The lock is a lease. A process that pauses (GC, swap, SIGSTOP) or whose
//     clock jumps can keep working after its validity ran out while another
//     client holds the lock. Do cancels fn's context at the end of validity,
//     but code that ignores the context, or a write already in flight, is not
//     stopped. Protect the resource itself (a fencing check or an atomic
//     conditional update in the store) when a double grant must never corrupt
//     it.
//   - Safety rests on the nodes: a node that loses keys on restart (no
//     appendfsync always and no delayed restart), evicts keys
//     (maxmemory-policy other than noeviction) or fails over to an async
//     replica can grant the same lock twice. Client.Check audits these.
//
// # Errors
//
// Every failed Acquire, TryAcquire, Release and Extend returns an
// *AttemptError that wraps one of ErrContended, ErrUnavailable,
// ErrValidityExhausted, ErrExpired or ErrNotHeld, and the context's error when
// the context ended the call, so both errors.Is(err, ErrContended) and
// errors.Is(err, context.DeadlineExceeded) work. An acquire that the circuit
// breaker stopped wraps ErrCircuitOpen, which itself wraps ErrUnavailable;
// one that found no place under the concurrency limit in time wraps
// ErrOverloaded.
package redlock

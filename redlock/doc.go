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
// A failed attempt releases the key on every node that may hold it: nodes
// that granted, nodes whose SET timed out or whose connection broke (a SET
// that timed out on the client may have succeeded on the server, or may still
// be queued on a stalled one), and nodes that answer only after the decision.
// A node that answered "not set" or an error, or that the request never
// reached (a refused connection), holds nothing and is left alone. This
// cleanup runs in the background, owned by the Client.
//
// A release whose outcome on a node is unknown (a timeout, a broken
// connection, a node that is down) is retried on that node with backoff,
// from the request timeout doubling up to one second, until the node gives a
// definite answer or the key's TTL has passed. This matters when a majority
// of nodes stalls (SIGSTOP, a long pause, a frozen VM) for longer than the
// request timeout: the SET waits queued on the stalled node while a single
// release, which cannot get through, would be lost, and the SET would then
// hold the key, owned by nobody, for a whole TTL once the node resumes. A
// resumed node works through what was queued in the order it arrived, and
// every retry is sent after the SET, so the release it answers runs after
// the SET; when the SET's own outcome was unknown, an answer "not there" is
// confirmed by one more release a backoff step later, in case a proxy or the
// network delayed the SET more than the release. Lock.Release does the same for the nodes a released lock may hold
// and that did not answer. Limits: a node stalled for longer than the TTL may
// run a queued SET after the retries have stopped, and that key then lives
// for a TTL from when it ran; Client.Close ends the retries after one last
// try (see Close).
//
// # Circuit breaker
//
// When DefaultBreakerThreshold consecutive acquire attempts found too few
// nodes answering for a quorum, the Client's circuit breaker opens: Acquire,
// TryAcquire and Do fail at once with an error that wraps ErrCircuitOpen and
// ErrUnavailable instead of retrying until their context ends. After
// DefaultBreakerCooldown one attempt at a time goes to the nodes as a probe;
// when a quorum answers it (granted or contended), the breaker closes. Any
// attempt that finds a quorum answering closes it, and contention never opens
// it. Every acquire Event reports the breaker's state; see WithCircuitBreaker
// and WithBreakerPolicy. A node that is only slow does not count against the
// quorum here: see Overload.
//
// # Overload
//
// Past its nodes' capacity, a Redlock client without restraint collapses:
// attempts queue on the nodes and time out, every timeout is retried and
// leaves a cleanup release behind, and the extra load makes the next
// attempts time out too, so goodput falls to a fraction of what the nodes
// can do and stays there while the load lasts. A Client restrains itself,
// with no tuning:
//
//   - an adaptive limit (AIMD) on its acquire attempts in flight, halved when
//     rounds show congestion (a request timeout on a node that is alive, no
//     pooled connection in time, a decision slower than half the request
//     timeout) and regrown by successes. An attempt that finds the limit
//     reached waits in line, without sending anything, for an attempt in
//     flight to be decided; only when no place comes before its round could
//     no longer finish within the caller's context (or the TTL, for a
//     context without deadline) does it fail with ErrOverloaded, its Event
//     marked Overloaded with the Limit. A closed loop of callers is thus
//     slowed to the nodes' pace, never turned away.
//   - a retry budget: retries of attempts that failed for want of nodes
//     never exceed DefaultRetryBurst plus DefaultRetryRatio of the first
//     attempts (retries after ErrContended are not counted).
//
// The limiter and the breaker read the same timeouts without fighting: a
// node that timed out while another node of the same round answered
// promptly is down (a partition, a crash), and counts for the breaker; a
// node set that is slow everywhere is congested, and shrinks the limit.
// WithMaxConcurrentAttempts replaces the adaptive limit by a fixed one, and
// WithOverloadControl(false) switches both off. The details are in
// overload.go.
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

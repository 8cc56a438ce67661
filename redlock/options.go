package redlock

import (
	"math/rand/v2"
	"time"
)

// Defaults of a Client.
const (
	// DefaultNodeTimeout bounds every request to one node (dial, read and
	// write) for clients made by NewNodes, and is the request timeout when no
	// node client states a positive read timeout.
	DefaultNodeTimeout = 50 * time.Millisecond
	// DefaultDriftFactor is the clock drift allowed per unit of TTL.
	DefaultDriftFactor = 0.01
	// DefaultDriftFixed is the fixed drift added to every validity.
	DefaultDriftFixed = 2 * time.Millisecond
	// DefaultBreakerThreshold is how many requests in a row must fail or
	// time out on a node before the circuit breaker (see BreakerState)
	// counts it as down. More than one, so that a single slow request on a
	// busy machine does not count a node out.
	DefaultBreakerThreshold = 5
	// DefaultBreakerCooldown is how long an open breaker refuses attempts
	// before it lets one probe through: about the cap of DefaultBackoff, so
	// an open breaker probes the nodes no more often than one caller
	// retrying at that cap would, however many callers there are, and a
	// quorum that is back is found within half a second.
	DefaultBreakerCooldown = 500 * time.Millisecond
)

// Background retries of a release whose outcome on a node is unknown (see
// Client.settle) start at the request timeout and double up to
// releaseRetryCap. At most releaseRetryConcurrency of them are in flight per
// node: a node that answers, but later than the request timeout (added
// latency), never gives a retry a definite answer, and every lock released
// meanwhile would otherwise keep a request to it in flight until its TTL.
const (
	releaseRetryCap         = time.Second
	releaseRetryConcurrency = 4
)

// Backoff returns the wait before retry n (n >= 1, the number of attempts
// made so far); ok=false stops retrying. It must be a pure function of n
// (randomness is fine, shared mutable state is not): one Backoff serves every
// goroutine of a Client.
type Backoff func(n int) (wait time.Duration, ok bool)

// RandomBackoff waits a uniformly random time in [lo, hi] before every retry
// and never stops; contending clients spread out instead of retrying in step.
func RandomBackoff(lo, hi time.Duration) Backoff {
	if hi < lo {
		lo, hi = hi, lo
	}
	return func(int) (time.Duration, bool) {
		if hi == lo {
			return lo, true
		}
		return lo + rand.N(hi-lo+1), true
	}
}

// ExponentialBackoff doubles the wait with every retry, from base up to max,
// and draws it at random from the upper half of that step ("equal jitter"):
// retry n waits in [d/2, d] with d = min(max, base·2^(n-1)). It never stops.
// The growth is what keeps an overloaded deployment from a retry storm: when
// nodes time out, fixed short retries multiply the load that made them slow.
func ExponentialBackoff(base, max time.Duration) Backoff {
	if base <= 0 {
		base = time.Millisecond
	}
	if max < base {
		max = base
	}
	return func(n int) (time.Duration, bool) {
		d := max
		if n < 1 {
			n = 1
		}
		if n <= 32 {
			if step := base << (n - 1); step > 0 && step < max {
				d = step
			}
		}
		half := d / 2
		return half + rand.N(d-half+1), true
	}
}

// DefaultBackoff is ExponentialBackoff(10ms, 400ms): retries 1, 2, 3, 4 wait
// 5–10, 10–20, 20–40, 40–80 ms, and so on up to 200–400 ms.
func DefaultBackoff(n int) (time.Duration, bool) {
	return defaultBackoff(n)
}

var defaultBackoff = ExponentialBackoff(10*time.Millisecond, 400*time.Millisecond)

// Option configures a Client in New.
type Option func(*config)

type config struct {
	observer    Observer
	backoff     Backoff
	maxAttempts int
	driftFactor float64
	driftFixed  time.Duration
	timeout     time.Duration // per-node request timeout; 0 = from the node clients

	maxConcurrent int // fixed bound on acquire attempts in flight; 0 = adaptive (or none)

	overloadOff bool // no adaptive limit, no retry budget
	retryRatio  float64
	retryBurst  int

	breakerOff       bool
	breakerThreshold int
	breakerCooldown  time.Duration
}

func defaultConfig() config {
	return config{
		backoff:          DefaultBackoff,
		driftFactor:      DefaultDriftFactor,
		driftFixed:       DefaultDriftFixed,
		breakerThreshold: DefaultBreakerThreshold,
		breakerCooldown:  DefaultBreakerCooldown,
		retryRatio:       DefaultRetryRatio,
		retryBurst:       DefaultRetryBurst,
	}
}

// WithObserver sets the Observer that receives an Event per attempt.
func WithObserver(o Observer) Option {
	return func(c *config) { c.observer = o }
}

// WithBackoff sets the wait between Acquire attempts (default DefaultBackoff,
// exponential from 10 ms to 400 ms with jitter).
func WithBackoff(b Backoff) Option {
	return func(c *config) {
		if b != nil {
			c.backoff = b
		}
	}
}

// WithMaxAttempts bounds the attempts of one Acquire; n <= 0 means no bound
// (the default): Acquire then retries until its context ends or, for a
// context without deadline, until one TTL has passed.
func WithMaxAttempts(n int) Option {
	return func(c *config) { c.maxAttempts = max(n, 0) }
}

// WithDrift sets the clock-drift allowance subtracted from every validity:
// ttl·factor + fixed (default 0.01 and 2 ms, as in the Redlock spec).
func WithDrift(factor float64, fixed time.Duration) Option {
	return func(c *config) {
		c.driftFactor = max(factor, 0)
		c.driftFixed = max(fixed, 0)
	}
}

// WithRequestTimeout sets how long one attempt waits for the nodes before it
// counts the silent ones as timed out. The default is the largest positive
// ReadTimeout among the node clients (NewNodes sets it to its node timeout),
// or DefaultNodeTimeout. An attempt never waits longer than the TTL.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithMaxConcurrentAttempts replaces the adaptive limit on concurrent
// acquire attempts (of Acquire, TryAcquire and Do; see WithOverloadControl)
// by a fixed bound of n; n <= 0 keeps the adaptive limit (the default). An
// attempt over the bound waits in line for a free slot before it sends
// anything; the request timeout of its nodes starts only once it is
// admitted. Where a waiter under the adaptive limit gives up with
// ErrOverloaded once its round could no longer finish in time, a waiter for
// a fixed slot waits for as long as its own context lasts: when the context
// ends first the call fails with an error that wraps the context's error
// (errors.Is holds), and Close makes waiters fail with ErrClosed. A slot is freed as soon as the attempt's round is decided,
// not when the background cleanup of its slow nodes ends. Release and Extend
// are never bounded. It applies even with WithOverloadControl(false).
func WithMaxConcurrentAttempts(n int) Option {
	return func(c *config) { c.maxConcurrent = max(n, 0) }
}

// WithOverloadControl switches the Client's overload control on (the
// default) or off: the adaptive limit on concurrent acquire attempts and the
// retry budget, documented with DefaultRetryRatio. Switch it off to measure
// what a deployment does without it; past the nodes' capacity, an open-loop
// load then collapses into timeouts and retries.
func WithOverloadControl(on bool) Option {
	return func(c *config) { c.overloadOff = !on }
}

// WithRetryBudget sets the retry budget: each call's first attempt adds
// ratio of a token (default DefaultRetryRatio), the budget holds at most
// burst tokens (default DefaultRetryBurst), and each retry of an attempt
// that failed for want of nodes takes one. Values <= 0 keep the default.
func WithRetryBudget(ratio float64, burst int) Option {
	return func(c *config) {
		if ratio > 0 {
			c.retryRatio = ratio
		}
		if burst > 0 {
			c.retryBurst = burst
		}
	}
}

// WithCircuitBreaker switches the circuit breaker of acquire attempts on (the
// default) or off; BreakerState describes it. Switch it off when a caller
// must keep trying for its whole context, e.g. to measure how long a
// deployment is unavailable.
func WithCircuitBreaker(on bool) Option {
	return func(c *config) { c.breakerOff = !on }
}

// WithBreakerPolicy sets after how many failed requests in a row a node
// counts as down for the circuit breaker (default DefaultBreakerThreshold) and
// how long it then refuses attempts before it lets a probe through (default
// DefaultBreakerCooldown). Values <= 0 keep the default. It does not switch
// a breaker on that WithCircuitBreaker(false) switched off.
func WithBreakerPolicy(threshold int, cooldown time.Duration) Option {
	return func(c *config) {
		if threshold > 0 {
			c.breakerThreshold = threshold
		}
		if cooldown > 0 {
			c.breakerCooldown = cooldown
		}
	}
}

func (c *config) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.driftFactor) + c.driftFixed
}

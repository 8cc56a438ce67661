package inventory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// MaxPause bounds an injected pause, so a typo cannot park a request (and
// the server's shutdown) for hours.
const MaxPause = 30 * time.Second

// Faults is the switchboard behind `redlab serve --fault-hooks`: it decides
// which reservations pause inside their critical section, and for how long.
// Two independent rules: a random fraction of all requests, and the next
// count requests (on command). The zero value is not usable; use NewFaults.
type Faults struct {
	mu       sync.Mutex
	random   time.Duration // pause for the random rule; 0 = off
	fraction float64
	next     time.Duration // pause for the on-command rule
	count    int           // requests left to pause on command
}

// FaultState is a snapshot of the rules.
type FaultState struct {
	// Random pauses Fraction of all requests for Duration.
	Random struct {
		Duration time.Duration
		Fraction float64
	}
	// Next pauses the next Count requests for Duration.
	Next struct {
		Duration time.Duration
		Count    int
	}
}

// NewFaults returns a switchboard with every rule off.
func NewFaults() *Faults { return &Faults{} }

func checkPause(d time.Duration) error {
	if d < 0 || d > MaxPause {
		return fmt.Errorf("%w: pause duration must be 0..%v, got %v", ErrInvalid, MaxPause, d)
	}
	return nil
}

// SetRandom pauses a fraction (0..1) of all requests for d; d = 0 or
// fraction = 0 turns the rule off.
func (f *Faults) SetRandom(d time.Duration, fraction float64) error {
	if err := checkPause(d); err != nil {
		return err
	}
	if !(fraction >= 0 && fraction <= 1) { // also rejects NaN
		return fmt.Errorf("%w: pause fraction must be 0..1, got %v", ErrInvalid, fraction)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.random, f.fraction = d, fraction
	return nil
}

// PauseNext pauses the next count requests for d, replacing any pending
// on-command pause; count = 0 cancels it.
func (f *Faults) PauseNext(d time.Duration, count int) error {
	if err := checkPause(d); err != nil {
		return err
	}
	if count < 0 || count > 1_000_000 {
		return fmt.Errorf("%w: pause count must be 0..1000000, got %d", ErrInvalid, count)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next, f.count = d, count
	return nil
}

// Clear turns every rule off.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.random, f.fraction, f.next, f.count = 0, 0, 0, 0
}

// State returns the current rules.
func (f *Faults) State() FaultState {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s FaultState
	s.Random.Duration, s.Random.Fraction = f.random, f.fraction
	s.Next.Duration, s.Next.Count = f.next, f.count
	return s
}

// take decides one request's pause and consumes an on-command slot.
func (f *Faults) take() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.count > 0 {
		f.count--
		return f.next
	}
	if f.random > 0 && f.fraction > 0 && rand.Float64() < f.fraction {
		return f.random
	}
	return 0
}

// Hook returns the PauseHook that applies the rules. The pause ignores
// the request's context on purpose: a stopped-the-world process does not
// notice that its client gave up.
func (f *Faults) Hook() PauseHook {
	return func(_ context.Context, _ Request) {
		if d := f.take(); d > 0 {
			time.Sleep(d)
		}
	}
}

package inventory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MaxPause bounds an injected pause, so a typo cannot park a request (and
// the server's shutdown) for hours.
const MaxPause = 30 * time.Second

// PauseScope is what a pause freezes.
type PauseScope string

// The scopes of a pause.
const (
	// ScopeRequest freezes the one request's goroutine: the rest of the
	// process (other requests, lock clients, keep-alives, extenders) runs on.
	ScopeRequest PauseScope = "request"
	// ScopeProcess stops the whole process with SIGSTOP, as a stop-the-world
	// GC pause or a VM stall does: every goroutine freezes, lease keep-alives
	// and lock extenders too. The process cannot wake itself: whoever armed
	// the pause sends SIGCONT (redlab drill does, after the pause's duration).
	ScopeProcess PauseScope = "process"
)

// pauseScopes is the catalogue of scopes, in the order they are listed.
var pauseScopes = []struct {
	scope PauseScope
	doc   string
}{
	{ScopeRequest, "the request's goroutine sleeps; the rest of the process runs on"},
	{ScopeProcess, "the whole process stops (SIGSTOP) until a SIGCONT from outside"},
}

// PauseScopes lists the scopes by name, comma-separated, for messages and
// help.
func PauseScopes() string {
	names := make([]string, len(pauseScopes))
	for i, s := range pauseScopes {
		names[i] = string(s.scope)
	}
	return strings.Join(names, ", ")
}

// ParsePauseScope returns the scope named s.
func ParsePauseScope(s string) (PauseScope, error) {
	for _, e := range pauseScopes {
		if string(e.scope) == s {
			return e.scope, nil
		}
	}
	return "", fmt.Errorf("inventory: unknown pause scope %q (want one of %s)", s, PauseScopes())
}

// ErrNoProcessStop is returned when a process-scope pause is asked of a
// switchboard that was not allowed to stop its process (EnableProcessStop).
var ErrNoProcessStop = errors.New("inventory: process-scope pauses are off (redlab serve --fault-hooks-sigstop)")

// ProcessPause is what a process-scope pause reports just before the
// process stops itself.
type ProcessPause struct {
	// At is the instant before the SIGSTOP.
	At time.Time
	// For is the pause's armed duration: how long the one who armed it
	// should wait before sending SIGCONT.
	For time.Duration
	Req Request
}

// Faults is the switchboard behind `redlab serve --fault-hooks`: it decides
// which reservations pause inside their critical section, for how long, and
// with which scope. Two independent rules: a random fraction of all requests
// (request scope), and the next count requests (on command, either scope).
// The zero value is not usable; use NewFaults.
type Faults struct {
	mu        sync.Mutex
	random    time.Duration // pause for the random rule; 0 = off
	fraction  float64
	next      time.Duration // pause for the on-command rule
	count     int           // requests left to pause on command
	nextScope PauseScope
	// onStop, when set, allows process-scope pauses and is told of each
	// one before the process stops.
	onStop func(ProcessPause)
}

// FaultState is a snapshot of the rules.
type FaultState struct {
	// Random pauses Fraction of all requests for Duration.
	Random struct {
		Duration time.Duration
		Fraction float64
	}
	// Next pauses the next Count requests for Duration, with Scope.
	Next struct {
		Duration time.Duration
		Count    int
		Scope    PauseScope
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

// EnableProcessStop allows process-scope pauses: the holder that takes one
// calls notify, then stops the whole process with SIGSTOP. notify must
// deliver its news before it returns (the process stops right after), and
// must not block for long. It is for drills only: a process stopped this
// way stays stopped until someone sends it SIGCONT.
func (f *Faults) EnableProcessStop(notify func(ProcessPause)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onStop = notify
}

// PauseNext pauses the next count requests for d with scope (empty:
// ScopeRequest), replacing any pending on-command pause; count = 0 cancels
// it. ScopeProcess needs EnableProcessStop (else ErrNoProcessStop).
func (f *Faults) PauseNext(d time.Duration, count int, scope PauseScope) error {
	if err := checkPause(d); err != nil {
		return err
	}
	if count < 0 || count > 1_000_000 {
		return fmt.Errorf("%w: pause count must be 0..1000000, got %d", ErrInvalid, count)
	}
	if scope == "" {
		scope = ScopeRequest
	}
	if _, err := ParsePauseScope(string(scope)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if scope == ScopeProcess && f.onStop == nil {
		return fmt.Errorf("%w: %w", ErrInvalid, ErrNoProcessStop)
	}
	f.next, f.count, f.nextScope = d, count, scope
	return nil
}

// Clear turns every rule off.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.random, f.fraction, f.next, f.count, f.nextScope = 0, 0, 0, 0, ""
}

// State returns the current rules.
func (f *Faults) State() FaultState {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s FaultState
	s.Random.Duration, s.Random.Fraction = f.random, f.fraction
	s.Next.Duration, s.Next.Count, s.Next.Scope = f.next, f.count, f.nextScope
	return s
}

// take decides one request's pause and consumes an on-command slot.
func (f *Faults) take() (time.Duration, PauseScope) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.count > 0 {
		f.count--
		return f.next, f.nextScope
	}
	if f.random > 0 && f.fraction > 0 && rand.Float64() < f.fraction {
		return f.random, ScopeRequest
	}
	return 0, ""
}

// Hook returns the PauseHook that applies the rules. The pause ignores
// the request's context on purpose: a stopped-the-world process does not
// notice that its client gave up.
func (f *Faults) Hook() PauseHook {
	return func(_ context.Context, req Request) {
		d, scope := f.take()
		switch {
		case d <= 0:
		case scope == ScopeProcess:
			f.mu.Lock()
			notify := f.onStop
			f.mu.Unlock()
			// The other threads stop asynchronously: this one may return
			// from kill and run on for a moment before the stop reaches it
			// (long enough to begin the write and take the store's lock).
			// It waits for the SIGCONT, so that the critical section goes
			// on only after the pause.
			cont := make(chan os.Signal, 1)
			signal.Notify(cont, syscall.SIGCONT)
			notify(ProcessPause{At: time.Now(), For: d, Req: req})
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			<-cont
			signal.Stop(cont)
		default:
			time.Sleep(d)
		}
	}
}

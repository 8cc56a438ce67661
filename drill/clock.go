package drill

import (
	"time"

	"golang.org/x/sys/unix"
)

// sharedClock maps this process's time readings to CLOCK_MONOTONIC and
// back. CLOCK_MONOTONIC is one clock for every process of the machine, so a
// drill can put the holds of its `redlab serve` processes on its own
// history's clock. Go's own monotonic readings cannot do that: they count
// from each process's start.
type sharedClock struct {
	at   time.Time // a reading of this process's clock (with its monotonic part)
	atNs int64     // CLOCK_MONOTONIC at the same instant, in ns
}

// newSharedClock pairs time.Now with CLOCK_MONOTONIC, read around it (the
// pair is off by half the time between the two reads, well under a
// microsecond).
func newSharedClock() sharedClock {
	before := monotonicNs()
	now := time.Now()
	after := monotonicNs()
	return sharedClock{at: now, atNs: before + (after-before)/2}
}

// monotonicNs reads CLOCK_MONOTONIC.
func monotonicNs() int64 {
	var ts unix.Timespec
	// CLOCK_MONOTONIC always exists on Linux; a failure leaves ts zero.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// mono is t on CLOCK_MONOTONIC; t must carry a monotonic reading of this
// process (time.Now and what is computed from it).
func (c sharedClock) mono(t time.Time) int64 { return c.atNs + int64(t.Sub(c.at)) }

// time is a CLOCK_MONOTONIC reading as this process's time.
func (c sharedClock) time(mono int64) time.Time { return c.at.Add(time.Duration(mono - c.atNs)) }

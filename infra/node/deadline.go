package node

import (
	"sync"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/internal/faultproxy"
)

// Network faults with a `for` (partition, latency: fault.ForEnds) end on
// the supervisor, not on the caller that asked for them: a drill killed in
// the middle of a 10s partition must not leave the node partitioned. The
// deadline is in the status file (Until), so a supervisor restarted after
// it passed ends the fault instead of applying it again, and one restarted
// before it waits out only what is left.

// deadlines are a supervisor's timers that end its faults after their
// `for`: at most one per kind. Every method runs under the supervisor's
// lock, mu; a timer that fires takes it, and calls end only while it is
// still the kind's timer (a heal or a new fault of the kind replaced it).
type deadlines struct {
	mu    *sync.Mutex
	wg    *sync.WaitGroup
	until *map[FaultKind]time.Time // the status's Until
	stops map[FaultKind]chan struct{}
	// end ends the fault of kind, mu held.
	end func(kind FaultKind)
}

// armLocked ends the fault of kind at at (cancelling an earlier timer of
// the kind); a zero at only cancels.
func (d *deadlines) armLocked(kind FaultKind, at time.Time) {
	d.cancelLocked(kind)
	if at.IsZero() {
		return
	}
	if *d.until == nil {
		*d.until = map[FaultKind]time.Time{}
	}
	(*d.until)[kind] = at.UTC()
	if d.stops == nil {
		d.stops = map[FaultKind]chan struct{}{}
	}
	stop := make(chan struct{})
	d.stops[kind] = stop
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		select {
		case <-stop:
			return
		case <-t.C:
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.stops[kind] != stop {
			return
		}
		delete(d.stops, kind)
		delete(*d.until, kind)
		d.end(kind)
	}()
}

// cancelLocked forgets kind's deadline: the fault ended some other way.
func (d *deadlines) cancelLocked(kind FaultKind) {
	if stop, ok := d.stops[kind]; ok {
		close(stop)
		delete(d.stops, kind)
	}
	if *d.until != nil {
		delete(*d.until, kind)
	}
}

// stopLocked ends every timer, leaving the deadlines in the status for the
// next supervisor (the faults themselves end with this one: endAllFaults).
func (d *deadlines) stopLocked() {
	for kind, stop := range d.stops {
		close(stop)
		delete(d.stops, kind)
	}
}

// expiredLocked forgets the deadlines a previous supervisor left in the
// status that have passed by now, and returns their kinds: the caller
// ends those faults instead of applying them again.
func (d *deadlines) expiredLocked(now time.Time) (expired []FaultKind) {
	for _, kind := range []FaultKind{fault.Partition, fault.Latency} {
		if at, ok := (*d.until)[kind]; ok && !at.After(now) {
			delete(*d.until, kind)
			expired = append(expired, kind)
		}
	}
	if len(*d.until) == 0 {
		*d.until = nil
	}
	return expired
}

// rearmLocked starts the timers of the deadlines in the status (a previous
// supervisor's that have not passed): once the fronts run, since end acts
// on them.
func (d *deadlines) rearmLocked() {
	left := make(map[FaultKind]time.Time, len(*d.until))
	for kind, at := range *d.until {
		left[kind] = at
	}
	for kind, at := range left {
		d.armLocked(kind, at)
	}
}

// deadlineOf is when a fault given for d from now ends (zero: no `for`).
func deadlineOf(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

// unpartition ends the partition alone, keeping a latency.
func (x *proxy) unpartition() error {
	return x.update(func(f *faultproxy.Fault) { f.Partition = false })
}

// endedByFor is the end event's note of a fault its `for` ended.
var endedByFor = map[string]string{"ended_by": "for"}

// endTimedLocked ends a partition or latency whose `for` passed.
func (d *daemon) endTimedLocked(kind FaultKind) {
	for _, x := range d.fronts {
		switch kind {
		case fault.Partition:
			if err := x.unpartition(); err != nil {
				d.log.Printf("end partition: %v", err)
			}
		case fault.Latency:
			if err := x.latency(0, 0); err != nil {
				d.log.Printf("end latency: %v", err)
			}
		}
	}
	d.clearNetworkLocked(kind)
	d.faults.endLocked(kind, endedByFor)
	d.saveLocked()
	d.log.Printf("%s ended: its for passed", kind)
}

// clearNetworkLocked clears the status's fields of network fault kind.
func (d *daemon) clearNetworkLocked(kind FaultKind) {
	switch kind {
	case fault.Partition:
		d.ds.Partitioned = false
	case fault.Latency:
		d.ds.Latency, d.ds.Jitter = 0, 0
	}
}

// endExpired ends, in the status a supervisor restored, the network faults
// of kinds, whose `for` passed while no supervisor ran.
func (d *daemon) endExpired(kinds []FaultKind) {
	for _, kind := range kinds {
		d.clearNetworkLocked(kind)
		if id := d.ds.Active[kind]; id != "" {
			_ = d.faults.rec.end(id, kind, map[string]string{"ended_by": "for (passed while no supervisor ran)"})
			delete(d.ds.Active, kind)
		}
	}
}

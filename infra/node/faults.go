package node

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
)

// FaultsFile is the name, in the state directory, of the fault log (see
// package faultlog for its format).
const FaultsFile = faultlog.FileName

// FaultKind names a fault: a kind of the catalogue (package fault).
type FaultKind = faultlog.Kind

// Fault is one injected fault with its start and end time. End is zero
// while the fault is still active.
type Fault = faultlog.Fault

// recorder appends fault events to the lab's faults.jsonl. Every node's
// supervisor appends to the same file (faultlog serialises the appends).
type recorder struct {
	path   string
	node   int
	prefix string // of every fault ID: "n2" for node 2, "e1" for etcd member 1
	params map[string]string
	seq    atomic.Int64
}

func newRecorder(stateDir string, node int) *recorder {
	return &recorder{path: filepath.Join(stateDir, FaultsFile), node: node, prefix: fmt.Sprintf("n%d", node)}
}

// newEtcdRecorder records the faults of etcd member id: node 0 (no Redis
// node) and the member in every fault's params (faultlog.EtcdMemberParam).
func newEtcdRecorder(stateDir string, id int) *recorder {
	return &recorder{path: filepath.Join(stateDir, FaultsFile), prefix: fmt.Sprintf("e%d", id),
		params: map[string]string{faultlog.EtcdMemberParam: strconv.Itoa(id)}}
}

func (r *recorder) start(kind FaultKind, params map[string]string) (Fault, error) {
	now := time.Now().UTC()
	if len(r.params) > 0 {
		merged := make(map[string]string, len(r.params)+len(params))
		for k, v := range r.params {
			merged[k] = v
		}
		for k, v := range params {
			merged[k] = v
		}
		params = merged
	}
	f := Fault{
		ID:     fmt.Sprintf("%s-%s-%d-%d", r.prefix, kind, now.UnixNano(), r.seq.Add(1)),
		Node:   r.node,
		Kind:   kind,
		Params: params,
		Start:  now,
	}
	err := r.append(faultlog.Event{ID: f.ID, Node: f.Node, Kind: kind, Phase: faultlog.Start, Time: now, Params: params})
	return f, err
}

func (r *recorder) end(id string, kind FaultKind, params map[string]string) error {
	return r.endAt(id, kind, time.Now(), params)
}

// endAt records the end of a fault as of at.
func (r *recorder) endAt(id string, kind FaultKind, at time.Time, params map[string]string) error {
	return r.append(faultlog.Event{ID: id, Node: r.node, Kind: kind, Phase: faultlog.End, Time: at.UTC(), Params: params})
}

func (r *recorder) append(ev faultlog.Event) error {
	if err := faultlog.Append(r.path, ev); err != nil {
		return fmt.Errorf("node: fault log: %w", err)
	}
	return nil
}

// faultBook is a supervisor's bookkeeping of its faults, shared by the
// node's and the etcd member's: every start and end goes to faults.jsonl,
// and the faults in effect are in the status's Active map (fault kind to
// ID), which save persists. At most one fault of a kind is active. Every
// method runs under the supervisor's lock.
type faultBook struct {
	rec    *recorder
	log    *log.Logger
	active *map[FaultKind]string // the status's Active
	save   func()                // persists the status (the lock held)
	// start is when each active fault started (this process's own faults;
	// a fault adopted from a previous supervisor has none).
	start map[FaultKind]time.Time
	// notes are parameters for the end event of an active fault.
	notes map[FaultKind]map[string]string
}

// startLocked records the start of a fault of kind, ending an earlier one
// of the same kind.
func (b *faultBook) startLocked(kind FaultKind, params map[string]string) Fault {
	b.endLocked(kind, nil)
	f, err := b.rec.start(kind, params)
	if err != nil {
		b.log.Printf("record: %v", err)
	}
	if *b.active == nil {
		*b.active = map[FaultKind]string{}
	}
	(*b.active)[kind] = f.ID
	if b.start == nil {
		b.start = map[FaultKind]time.Time{}
	}
	b.start[kind] = f.Start
	b.save()
	return f
}

func (b *faultBook) endLocked(kind FaultKind, params map[string]string) {
	b.endAtLocked(kind, time.Now(), params)
}

// endAtLocked ends the active fault of kind as of at, with its notes and
// params.
func (b *faultBook) endAtLocked(kind FaultKind, at time.Time, params map[string]string) {
	id := (*b.active)[kind]
	// Never before its own start (a fault started while the process was
	// already coming back).
	if st, ok := b.start[kind]; ok && at.Before(st) {
		at = st
	}
	delete(b.start, kind)
	notes := b.notes[kind]
	delete(b.notes, kind)
	if id == "" {
		return
	}
	if len(notes) > 0 {
		merged := make(map[string]string, len(notes)+len(params))
		for k, v := range notes {
			merged[k] = v
		}
		for k, v := range params {
			merged[k] = v
		}
		params = merged
	}
	if err := b.rec.endAt(id, kind, at, params); err != nil {
		b.log.Printf("record: %v", err)
	}
	delete(*b.active, kind)
	b.save()
}

// endAllLocked ends every active fault, its end event saying endedBy: the
// supervisor stops for good, and the faults with it.
func (b *faultBook) endAllLocked(endedBy string) {
	for kind := range *b.active {
		b.endLocked(kind, map[string]string{"ended_by": endedBy})
	}
}

// ReadFaults returns the faults recorded in stateDir, ordered by start time.
// A missing file means no faults.
func ReadFaults(stateDir string) ([]Fault, error) {
	faults, err := faultlog.Read(filepath.Join(stateDir, FaultsFile))
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return faults, nil
}

// crashFaults are the faults that end when the process answers again.
var crashFaults = []FaultKind{fault.Kill, fault.PowerLoss, fault.Restart, fault.Stop}

// daemonFaults are the kinds every daemon applies the same way, each on
// the methods below (inject.go makes them every target's).
var daemonFaults = []struct {
	kind fault.Kind
	fn   fault.ApplyFunc[*daemon]
}{
	{fault.Kill, func(d *daemon, ctx context.Context, _ fault.Params) (fault.Result, error) {
		f, err := d.kill(ctx, nil, notes(ctx))
		return recorded(f), err
	}},
	{fault.PowerLoss, func(d *daemon, ctx context.Context, _ fault.Params) (fault.Result, error) {
		f, pl, err := d.powerLoss(ctx, notes(ctx))
		r := recorded(f)
		r.PowerLoss = pl
		return r, err
	}},
	{fault.Restart, func(d *daemon, ctx context.Context, p fault.Params) (fault.Result, error) {
		delay := p.D("delay") // required: Validate
		f, err := d.kill(ctx, &delay, notes(ctx))
		return recorded(f), err
	}},
	{fault.Stop, func(d *daemon, ctx context.Context, _ fault.Params) (fault.Result, error) {
		f, err := d.stop(ctx, notes(ctx))
		return recorded(f), err
	}},
	{fault.Start, func(d *daemon, ctx context.Context, _ fault.Params) (fault.Result, error) {
		return fault.Result{}, d.startAgain(ctx)
	}},
	{fault.Pause, func(d *daemon, ctx context.Context, p fault.Params) (fault.Result, error) {
		f, err := d.pause(p.D(fault.For), notes(ctx))
		return recorded(f), err
	}},
	{fault.Partition, func(d *daemon, ctx context.Context, p fault.Params) (fault.Result, error) {
		f, err := d.partition(p.D(fault.For), notes(ctx))
		return recorded(f), err
	}},
	{fault.Heal, func(d *daemon, _ context.Context, _ fault.Params) (fault.Result, error) {
		d.heal()
		return fault.Result{}, nil
	}},
	{fault.Latency, func(d *daemon, ctx context.Context, p fault.Params) (fault.Result, error) {
		f, err := d.latency(p.D("add"), p.D("jitter"), p.D(fault.For), notes(ctx))
		return recorded(f), err
	}},
}

// kill SIGKILLs the process (a crash: nothing is flushed). With delay set
// (the restart fault) the next start waits delay instead of the configured
// restart delay. It returns once the process is gone.
func (d *daemon) kill(ctx context.Context, delay *time.Duration, params map[string]string) (*Fault, error) {
	d.mu.Lock()
	p, cancelWait := d.proc, d.cancelWait
	if delay == nil && p == nil {
		err := d.notRunningLocked()
		d.mu.Unlock()
		return nil, err
	}
	kind := fault.Kill
	if delay != nil {
		kind = fault.Restart
		params["delay"] = delay.String()
		d.override = delay
		d.wantUp = true
	}
	f := d.faults.startLocked(kind, params)
	d.mu.Unlock()
	switch {
	case p != nil:
		signalGroup(p.pid, syscall.SIGKILL)
		// Return once the loop has seen the crash.
		if err := d.waitFor(ctx, func() bool { return *d.pid != p.pid }); err != nil {
			return nil, err
		}
	case cancelWait != nil:
		// Waiting out a delay: wait the new one instead.
		cancelWait()
	default:
		d.poke()
	}
	return &f, nil
}

// stop shuts the process down cleanly and keeps it down until start.
func (d *daemon) stop(ctx context.Context, params map[string]string) (*Fault, error) {
	d.mu.Lock()
	if !d.wantUp && d.proc == nil {
		d.mu.Unlock()
		return nil, nil
	}
	d.wantUp = false
	f := d.faults.startLocked(fault.Stop, params)
	p, cancelWait := d.proc, d.cancelWait
	d.mu.Unlock()
	if p != nil {
		d.stopProc(p)
	}
	if cancelWait != nil {
		cancelWait()
	}
	d.poke()
	err := d.waitFor(ctx, func() bool { return d.ds.State == Stopped })
	return &f, err
}

// startAgain starts a stopped daemon and waits until its kind says it has
// started (startedLocked).
func (d *daemon) startAgain(ctx context.Context) error {
	d.mu.Lock()
	d.wantUp = true
	d.mu.Unlock()
	d.poke()
	return d.waitFor(ctx, d.kind.startedLocked)
}

// pause SIGSTOPs the process for dur: connections stay open, nothing
// answers.
func (d *daemon) pause(dur time.Duration, params map[string]string) (*Fault, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.proc
	if p == nil || (d.ds.State != Up && d.ds.State != Paused) {
		return nil, d.notRunningLocked()
	}
	d.stopPauseLocked()
	params["for"] = dur.String()
	f := d.faults.startLocked(fault.Pause, params)
	d.paused.start(p, dur, &d.wg, d.resume)
	d.setStateLocked(Paused)
	return &f, nil
}

func (d *daemon) resume(p *child) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.paused.proc != p {
		return
	}
	d.stopPauseLocked() // continues p
	if d.proc == p && d.ds.State == Paused {
		d.setStateLocked(Up)
	}
}

// stopPauseLocked forgets the pause (the caller continues or lost the
// process) and ends its fault.
func (d *daemon) stopPauseLocked() {
	d.paused.stop()
	d.faults.endLocked(fault.Pause, nil)
}

// partition silences the fronts, for dur when dur > 0 (deadline.go). A
// partition already in place keeps its fault and takes dur as its new
// deadline.
func (d *daemon) partition(dur time.Duration, params map[string]string) (*Fault, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ds.Partitioned {
		d.timers.armLocked(fault.Partition, deadlineOf(dur))
		d.saveLocked()
		return nil, nil
	}
	if err := d.eachFront((*proxy).partition); err != nil {
		return nil, err
	}
	d.ds.Partitioned = true
	return d.startTimedLocked(fault.Partition, dur, params), nil
}

// heal removes every network fault: partition and latency.
func (d *daemon) heal() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range d.fronts {
		if err := x.heal(); err != nil {
			// Healed: the front carries every connection meanwhile.
			d.log.Printf("heal: %v", err)
		}
	}
	d.ds.Partitioned, d.ds.Latency, d.ds.Jitter = false, 0, 0
	d.timers.cancelLocked(fault.Partition)
	d.timers.cancelLocked(fault.Latency)
	d.faults.endLocked(fault.Partition, nil)
	d.faults.endLocked(fault.Latency, nil)
	d.saveLocked()
}

// latency delays every reply of the fronts by add ± jitter, for dur when
// dur > 0 (deadline.go); add 0 removes it.
func (d *daemon) latency(add, jitter, dur time.Duration, params map[string]string) (*Fault, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.eachFront(func(x *proxy) error { return x.latency(add, jitter) }); err != nil {
		return nil, err
	}
	d.timers.cancelLocked(fault.Latency)
	d.faults.endLocked(fault.Latency, nil)
	d.ds.Latency, d.ds.Jitter = Duration(add), Duration(jitter)
	if add <= 0 {
		d.ds.Latency, d.ds.Jitter = 0, 0
		d.saveLocked()
		return nil, nil
	}
	params["add"], params["jitter"] = add.String(), jitter.String()
	return d.startTimedLocked(fault.Latency, dur, params), nil
}

// eachFront runs fn on every front, up to the first error.
func (d *daemon) eachFront(fn func(*proxy) error) error {
	for _, x := range d.fronts {
		if err := fn(x); err != nil {
			return err
		}
	}
	return nil
}

// startTimedLocked records the start of a network fault of kind that ends
// after dur when dur > 0 (deadline.go).
func (d *daemon) startTimedLocked(kind FaultKind, dur time.Duration, params map[string]string) *Fault {
	if dur > 0 {
		params["for"] = dur.String()
	}
	d.timers.armLocked(kind, deadlineOf(dur))
	f := d.faults.startLocked(kind, params)
	return &f
}

// endAllFaults closes every fault still open when the supervisor stops for
// good: the daemon, and its faults, are gone.
func (d *daemon) endAllFaults() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults.endAllLocked(d.endedBy)
	d.ds.Partitioned, d.ds.Latency, d.ds.Jitter = false, 0, 0
	d.ds.Until = nil
	d.saveLocked()
}

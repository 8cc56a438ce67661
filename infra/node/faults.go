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

func (s *supervisor) notRunningLocked() error {
	return fmt.Errorf("%w on node %d (%s)", ErrNotRunning, s.spec.ID, s.st.State)
}

// kill SIGKILLs redis-server (a crash: nothing is flushed). With delay set
// (the restart fault) the next pre-start uses it instead of the configured
// restart delay. It returns once the process is gone.
func (s *supervisor) kill(ctx context.Context, delay *time.Duration) (FaultResult, error) {
	s.mu.Lock()
	p, cancelGuard := s.proc, s.cancelGuard
	if delay == nil && p == nil {
		err := s.notRunningLocked()
		s.mu.Unlock()
		return FaultResult{}, err
	}
	var f Fault
	if delay == nil {
		f = s.faults.startLocked(fault.Kill, nil)
	} else {
		f = s.faults.startLocked(fault.Restart, map[string]string{"delay": delay.String()})
		s.override = delay
		s.wantUp = true
	}
	s.mu.Unlock()
	switch {
	case p != nil:
		signalGroup(p.pid, syscall.SIGKILL)
		// Return once the supervisor has seen the crash.
		err := s.waitFor(ctx, func(st Status) bool { return st.RedisPID != p.pid })
		if err != nil {
			return FaultResult{}, err
		}
	case cancelGuard != nil:
		// Waiting out a delay: wait the new one instead.
		cancelGuard()
	default:
		s.poke()
	}
	return FaultResult{Fault: &f}, nil
}

// stop shuts redis-server down cleanly and keeps it down until start.
func (s *supervisor) stop(ctx context.Context) (FaultResult, error) {
	s.mu.Lock()
	if !s.wantUp && s.proc == nil {
		s.mu.Unlock()
		return FaultResult{}, nil
	}
	s.wantUp = false
	f := s.faults.startLocked(fault.Stop, nil)
	p, cancelGuard := s.proc, s.cancelGuard
	s.mu.Unlock()
	if p != nil {
		s.stopProc(p)
	}
	if cancelGuard != nil {
		cancelGuard()
	}
	s.poke()
	err := s.waitFor(ctx, func(st Status) bool { return st.State == Stopped })
	return FaultResult{Fault: &f}, err
}

// startNode starts a stopped node and waits until it answers.
func (s *supervisor) startNode(ctx context.Context) (FaultResult, error) {
	s.mu.Lock()
	s.wantUp = true
	s.mu.Unlock()
	s.poke()
	err := s.waitFor(ctx, func(st Status) bool { return st.State == Up || st.State == Paused })
	return FaultResult{}, err
}

// pause SIGSTOPs redis-server for d: connections stay open, nothing answers.
func (s *supervisor) pause(d time.Duration) (FaultResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || (s.st.State != Up && s.st.State != Paused) {
		return FaultResult{}, s.notRunningLocked()
	}
	s.stopPauseLocked()
	f := s.faults.startLocked(fault.Pause, map[string]string{"for": d.String()})
	s.paused.start(p, d, &s.wg, s.resume)
	s.setStateLocked(Paused)
	return FaultResult{Fault: &f}, nil
}

func (s *supervisor) resume(p *child) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused.proc != p {
		return
	}
	s.stopPauseLocked() // continues p
	if s.proc == p && s.st.State == Paused {
		s.setStateLocked(Up)
	}
}

// stopPauseLocked forgets the pause (the caller continues or lost the
// process) and ends its fault.
func (s *supervisor) stopPauseLocked() {
	s.paused.stop()
	s.faults.endLocked(fault.Pause, nil)
}

// partition silences the front, for d when d > 0 (deadline.go). A
// partition already in place keeps its fault and takes d as its new
// deadline.
func (s *supervisor) partition(d time.Duration) (FaultResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.Partitioned {
		s.timers.armLocked(fault.Partition, deadlineOf(d))
		s.saveLocked()
		return FaultResult{}, nil
	}
	if err := s.proxy.partition(); err != nil {
		return FaultResult{}, err
	}
	s.st.Partitioned = true
	var params map[string]string
	if d > 0 {
		params = map[string]string{"for": d.String()}
	}
	s.timers.armLocked(fault.Partition, deadlineOf(d))
	f := s.faults.startLocked(fault.Partition, params)
	return FaultResult{Fault: &f}, nil
}

// heal removes every network fault: partition and latency.
func (s *supervisor) heal() FaultResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.proxy.heal(); err != nil {
		// Healed: the front carries every connection meanwhile.
		s.log.Printf("heal: %v", err)
	}
	s.st.Partitioned, s.st.Latency, s.st.Jitter = false, 0, 0
	s.timers.cancelLocked(fault.Partition)
	s.timers.cancelLocked(fault.Latency)
	s.faults.endLocked(fault.Partition, nil)
	s.faults.endLocked(fault.Latency, nil)
	s.saveLocked()
	return FaultResult{}
}

// latency delays every reply by add ± jitter, for d when d > 0
// (deadline.go); add 0 removes it.
func (s *supervisor) latency(add, jitter, d time.Duration) (FaultResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.proxy.latency(add, jitter); err != nil {
		return FaultResult{}, err
	}
	s.timers.cancelLocked(fault.Latency)
	s.faults.endLocked(fault.Latency, nil)
	s.st.Latency, s.st.Jitter = Duration(add), Duration(jitter)
	if add <= 0 {
		s.st.Jitter = 0
		s.saveLocked()
		return FaultResult{}, nil
	}
	params := map[string]string{"add": add.String(), "jitter": jitter.String()}
	if d > 0 {
		params["for"] = d.String()
	}
	s.timers.armLocked(fault.Latency, deadlineOf(d))
	f := s.faults.startLocked(fault.Latency, params)
	return FaultResult{Fault: &f}, nil
}

// stopBackground ends the pause timer and the clock-rate goroutine.
func (s *supervisor) stopBackground() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopPauseLocked()
	s.timers.stopLocked()
	if s.rateStop != nil {
		s.rateStop()
		s.rateStop = nil
	}
}

// endAllFaults closes every fault still open when the supervisor stops for
// good: the node, and its faults, are gone.
func (s *supervisor) endAllFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.endAllLocked("node stop")
	s.st.Partitioned, s.st.Latency, s.st.Jitter = false, 0, 0
	s.st.Until = nil
	s.saveLocked()
}

package lab

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"syscall"
	"time"
)

// FaultsFile is the name, in the state directory, of the fault log: JSON
// lines, one "start" and one "end" event per fault (ReadFaults merges them).
const FaultsFile = "faults.jsonl"

// FaultKind names a fault.
type FaultKind string

// The faults a node supervisor can inject.
const (
	FaultKill      FaultKind = "kill"       // SIGKILL; ends when the node answers again
	FaultPowerLoss FaultKind = "power-loss" // SIGKILL, unsynced AOF cut; ends when the node answers again
	FaultRestart   FaultKind = "restart"    // SIGKILL, restart with a delay override; ends when up
	FaultStop      FaultKind = "stop"       // clean stop; ends at the next start
	FaultPause     FaultKind = "pause"      // SIGSTOP; ends at SIGCONT
	FaultPartition FaultKind = "partition"  // proxy answers nothing; ends at heal
	FaultLatency   FaultKind = "latency"    // proxy delays replies; ends at heal or a new latency
	FaultClockJump FaultKind = "clock-jump" // instantaneous
	FaultClockRate FaultKind = "clock-rate" // repeated jumps for a duration
)

// Fault is one injected fault with its start and end time. End is zero
// while the fault is still active. faults.jsonl keeps both to the
// nanosecond (RFC 3339, UTC), so a fault can be placed exactly among the
// lock tenures of a run.
type Fault struct {
	ID     string            `json:"id"`
	Node   int               `json:"node"`
	Kind   FaultKind         `json:"fault"`
	Params map[string]string `json:"params,omitempty"`
	Start  time.Time         `json:"start"`
	End    time.Time         `json:"end,omitzero"`
}

// Active reports whether the fault has not ended.
func (f Fault) Active() bool { return f.End.IsZero() }

// faultEvent is one line of faults.jsonl.
type faultEvent struct {
	ID     string            `json:"id"`
	Node   int               `json:"node"`
	Kind   FaultKind         `json:"fault"`
	Event  string            `json:"event"` // start | end
	Time   time.Time         `json:"time"`
	Params map[string]string `json:"params,omitempty"`
}

// recorder appends fault events to the lab's faults.jsonl. Every node's
// supervisor appends to the same file, serialised by flock.
type recorder struct {
	path string
	node int
	seq  atomic.Int64
}

func newRecorder(stateDir string, node int) *recorder {
	return &recorder{path: filepath.Join(stateDir, FaultsFile), node: node}
}

func (r *recorder) start(kind FaultKind, params map[string]string) (Fault, error) {
	now := time.Now().UTC()
	f := Fault{
		ID:     fmt.Sprintf("n%d-%s-%d-%d", r.node, kind, now.UnixNano(), r.seq.Add(1)),
		Node:   r.node,
		Kind:   kind,
		Params: params,
		Start:  now,
	}
	err := r.append(faultEvent{ID: f.ID, Node: f.Node, Kind: kind, Event: "start", Time: now, Params: params})
	return f, err
}

func (r *recorder) end(id string, kind FaultKind, params map[string]string) error {
	return r.append(faultEvent{ID: id, Node: r.node, Kind: kind, Event: "end", Time: time.Now().UTC(), Params: params})
}

func (r *recorder) append(ev faultEvent) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("lab: fault log: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lab: fault log lock: %w", err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("lab: fault log: %w", err)
	}
	return nil
}

// ReadFaults returns the faults recorded in stateDir, ordered by start time.
// A missing file means no faults.
func ReadFaults(stateDir string) ([]Fault, error) {
	f, err := os.Open(filepath.Join(stateDir, FaultsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	defer f.Close()
	byID := map[string]*Fault{}
	var order []*Fault
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var ev faultEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("lab: %s line %d: %w", FaultsFile, line, err)
		}
		ft := byID[ev.ID]
		if ft == nil {
			ft = &Fault{ID: ev.ID, Node: ev.Node, Kind: ev.Kind}
			byID[ev.ID] = ft
			order = append(order, ft)
		}
		switch ev.Event {
		case "start":
			ft.Start = ev.Time
		case "end":
			ft.End = ev.Time
		}
		for k, v := range ev.Params {
			if ft.Params == nil {
				ft.Params = map[string]string{}
			}
			ft.Params[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("lab: %s: %w", FaultsFile, err)
	}
	out := make([]Fault, len(order))
	for i, ft := range order {
		out[i] = *ft
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

// Package faultlog owns faults.jsonl, the record of every fault the lab
// injects. The node supervisors append to it (under an exclusive flock, so
// several processes can share one file); the lab, the drill engine and the
// load generator's reports read it back through Read, one Fault per fault.
//
// The file is JSON lines, one event per line, exactly this shape:
//
//	{"id":"n2-kill-1735725605000000000-1","node":2,"fault":"kill","event":"start","time":"2025-01-01T10:00:05.123Z"}
//	{"id":"n2-kill-1735725605000000000-1","node":2,"fault":"kill","event":"end","time":"2025-01-01T10:00:12.5Z","params":{"restarts":"1"}}
//
// The fields:
//   - id: unique per fault; both events of a fault carry it.
//   - node: the node's number, from 1 (0: not tied to one node).
//   - fault: the kind (kill, restart, stop, pause, partition, latency,
//     clock-jump, clock-rate, …).
//   - event: "start" or "end". A fault has one start and at most one end,
//     after it in the file; a fault without an end is still in effect.
//   - time: RFC 3339 with any fraction of a second.
//   - params: optional string values; an end's params are merged over its
//     start's. A fault on an etcd member has node 0 and the member's number
//     in params.etcd_member (EtcdMemberParam).
//
// Nothing else is read: a line of another shape is an error naming the line,
// so a record that drifted from this format cannot be half understood.
package faultlog

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/internal/flock"
)

// FileName is the log's name, in a lab's state directory and in a run
// directory.
const FileName = "faults.jsonl"

// Kind names a fault ("kill", "partition", …): the catalogue's kind
// (package fault owns the kinds). The log records any.
type Kind = fault.Kind

// Phase is an event's place in its fault's life: the "event" field.
type Phase string

// The two phases of a fault.
const (
	Start Phase = "start"
	End   Phase = "end"
)

// Event is one line of the log.
type Event struct {
	ID     string            `json:"id"`
	Node   int               `json:"node"`
	Kind   Kind              `json:"fault"`
	Phase  Phase             `json:"event"`
	Time   time.Time         `json:"time"`
	Params map[string]string `json:"params,omitempty"`
}

func (e Event) check() error {
	switch {
	case e.ID == "":
		return errors.New("no id")
	case e.Kind == "":
		return errors.New(`no "fault" (its kind)`)
	case e.Phase != Start && e.Phase != End:
		return fmt.Errorf(`"event" is %q, want "start" or "end"`, e.Phase)
	case e.Time.IsZero():
		return errors.New("no time")
	case e.Node < 0:
		return fmt.Errorf("node %d: want a number from 1, or 0", e.Node)
	}
	return nil
}

// EtcdMemberParam is the param naming the etcd member (from 1) a fault acted
// on; such a fault is tied to no Redis node (node 0).
const EtcdMemberParam = "etcd_member"

// Fault is one fault, its start and end events merged. End is zero while
// the fault is in effect.
type Fault struct {
	ID     string
	Node   int
	Kind   Kind
	Params map[string]string
	Start  time.Time
	End    time.Time
}

// Active reports whether the fault has not ended.
func (f Fault) Active() bool { return f.End.IsZero() }

// Name is how a report labels the fault: "kill node2", "kill etcd1" for an
// etcd member, or the kind alone for a fault not tied to one node.
func (f Fault) Name() string {
	if f.Node > 0 {
		return string(f.Kind) + " node" + strconv.Itoa(f.Node)
	}
	if m := f.Params[EtcdMemberParam]; m != "" {
		return string(f.Kind) + " etcd" + m
	}
	return string(f.Kind)
}

// Events returns the fault as the events that record it: its start, and its
// end when it has ended (the params go with the start).
func (f Fault) Events() []Event {
	evs := []Event{{ID: f.ID, Node: f.Node, Kind: f.Kind, Phase: Start, Time: f.Start, Params: f.Params}}
	if !f.Active() {
		evs = append(evs, Event{ID: f.ID, Node: f.Node, Kind: f.Kind, Phase: End, Time: f.End})
	}
	return evs
}

// Append adds events to the log at path, creating it. The events are written
// in one write under an exclusive flock, so appends of several processes
// never interleave within a line. An event Read would reject is refused
// before anything is written.
func Append(path string, evs ...Event) error {
	var buf []byte
	for _, ev := range evs {
		if err := ev.check(); err != nil {
			return fmt.Errorf("faultlog: event %+v: %w", ev, err)
		}
		b, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("faultlog: %w", err)
		}
		buf = append(append(buf, b...), '\n')
	}
	if len(buf) == 0 {
		return nil
	}
	// Every holder keeps the lock for one write, so the wait needs no
	// deadline of its own.
	unlock, err := flock.Lock(context.Background(), path)
	if err != nil {
		return fmt.Errorf("faultlog: %w", err)
	}
	defer unlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("faultlog: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(buf); err != nil {
		return fmt.Errorf("faultlog: %w", err)
	}
	return nil
}

// Read returns the faults recorded at path, ordered by start time (faults
// starting together keep the file's order). A missing file is no faults.
func Read(path string) ([]Fault, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("faultlog: %w", err)
	}
	defer f.Close()
	byID := map[string]*Fault{}
	var order []*Fault
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("faultlog: %s line %d: %w", path, line, err)
		}
		if err := ev.check(); err != nil {
			return nil, fmt.Errorf("faultlog: %s line %d: %w", path, line, err)
		}
		ft := byID[ev.ID]
		switch {
		case ev.Phase == Start && ft != nil:
			return nil, fmt.Errorf("faultlog: %s line %d: fault %q starts a second time", path, line, ev.ID)
		case ev.Phase == Start:
			ft = &Fault{ID: ev.ID, Node: ev.Node, Kind: ev.Kind, Start: ev.Time}
			byID[ev.ID] = ft
			order = append(order, ft)
		case ft == nil:
			return nil, fmt.Errorf("faultlog: %s line %d: fault %q ends but never started", path, line, ev.ID)
		case !ft.Active():
			return nil, fmt.Errorf("faultlog: %s line %d: fault %q ends a second time", path, line, ev.ID)
		case ev.Node != ft.Node || ev.Kind != ft.Kind:
			return nil, fmt.Errorf("faultlog: %s line %d: fault %q ends as %s on node %d, started as %s on node %d",
				path, line, ev.ID, ev.Kind, ev.Node, ft.Kind, ft.Node)
		default:
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
		return nil, fmt.Errorf("faultlog: %s: %w", path, err)
	}
	out := make([]Fault, len(order))
	for i, ft := range order {
		out[i] = *ft
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

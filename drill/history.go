package drill

import (
	"bufio"
	"encoding/json"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/fault"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
)

// HistoryFile is the raw history of a drill in its directory: one JSON
// object a line, every lock tenure, every fault event and every operation
// of the loads, with times in nanoseconds since the start of the load on
// one monotonic clock. Anyone can recompute the drill's double grants and
// lock violations from it alone (loadgen.HoldChecker over its holds:
// checkHolds), and, with each guard's store for the ledger, check its
// operations against a model of the stock (package linear).
const HistoryFile = "history.jsonl"

// HoldRecord is the wire form of an inventory.Hold, a lock tenure, in the
// history and in a serve process's event stream ("type":"hold"): the hold
// with its guard, its times in ns on the stream's clock. newHoldRecord is
// its one writer, Hold its one reader.
type HoldRecord struct {
	Type   string `json:"type"` // "hold"
	Guard  string `json:"guard"`
	Key    string `json:"key"`
	Holder string `json:"holder"`
	Token  string `json:"token"`
	// GrantedNs is when the holder got the lock, ValidUntilNs when its
	// validity ran out (as its lock client computed it at the grant),
	// ReleasedNs when it started to release it.
	GrantedNs    int64 `json:"granted_ns"`
	ValidUntilNs int64 `json:"valid_until_ns"`
	ReleasedNs   int64 `json:"released_ns"`
}

// newHoldRecord encodes guard g's hold h, reading its times with ns. An
// unknown validity (zero ValidUntil) is written as the release: valid until
// released, as the checker counts it.
func newHoldRecord(g inventory.Guard, h inventory.Hold, ns func(time.Time) int64) HoldRecord {
	r := HoldRecord{Type: "hold", Guard: string(g), Key: h.Key, Holder: h.Holder, Token: h.Token,
		GrantedNs: ns(h.Granted), ReleasedNs: ns(h.Released)}
	if h.ValidUntil.IsZero() {
		r.ValidUntilNs = r.ReleasedNs
	} else {
		r.ValidUntilNs = ns(h.ValidUntil)
	}
	return r
}

// Hold decodes the record, placing its times with at.
func (r HoldRecord) Hold(at func(ns int64) time.Time) inventory.Hold {
	return inventory.Hold{Key: r.Key, Holder: r.Holder, Token: r.Token,
		Granted: at(r.GrantedNs), Released: at(r.ReleasedNs), ValidUntil: at(r.ValidUntilNs)}
}

// FaultRecord is a fault's start or end in the history ("type":"fault").
type FaultRecord struct {
	Type  string `json:"type"` // "fault"
	ID    string `json:"id"`   // pairs a start with its end
	Fault string `json:"fault"`
	// Nodes are numbered from 1; empty for client-pause, which names Guard,
	// and for a fault on an etcd member, which names EtcdMember.
	Nodes []int  `json:"nodes"`
	Guard string `json:"guard,omitempty"`
	// Scope is a client-pause's scope: request (one request's goroutine)
	// or process (the whole service process, SIGSTOP).
	Scope string `json:"scope,omitempty"`
	// EtcdMember is the etcd member (from 1) the fault acted on; Target is
	// "leader" when it was chosen as the leader when the fault fired.
	EtcdMember int    `json:"etcd_member,omitempty"`
	Target     string `json:"target,omitempty"`
	Event      string `json:"event"` // "start" | "end"
	AtNs       int64  `json:"at_ns"`
}

// OpRecord is one reservation of a guard's load ("type":"op"): what it
// asked, when it was due, sent and answered, and how it ended.
type OpRecord struct {
	Type  string `json:"type"` // "op"
	Guard string `json:"guard"`
	Seq   uint64 `json:"seq"`
	// RequestID is the ID the ledger keeps when it committed.
	RequestID string `json:"request_id"`
	Key       string `json:"key"`
	Quantity  int64  `json:"quantity"`
	// DueNs is when the schedule wanted it sent; SentNs and EndedNs when
	// it was sent and answered, both -1 when it was never sent (late).
	DueNs   int64 `json:"due_ns"`
	SentNs  int64 `json:"sent_ns"`
	EndedNs int64 `json:"ended_ns"`
	// Outcome is the load generator's (reserved, out_of_stock, …).
	Outcome string `json:"outcome"`
}

// History is a drill's record, filled concurrently while it runs.
type History struct {
	start time.Time

	mu     sync.Mutex
	holds  []HoldRecord
	faults []FaultRecord
	ops    []OpRecord
}

// NewHistory starts a history whose clock reads 0 at start.
func NewHistory(start time.Time) *History { return &History{start: start} }

// Start is the history's time zero.
func (h *History) Start() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.start
}

// begin sets time zero: the instant every guard's load starts.
func (h *History) begin(t time.Time) {
	h.mu.Lock()
	h.start = t
	h.mu.Unlock()
}

func (h *History) ns(t time.Time) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return int64(t.Sub(h.start))
}

// AddHold records guard g's lock tenure hold.
func (h *History) AddHold(g inventory.Guard, hold inventory.Hold) {
	r := newHoldRecord(g, hold, h.ns)
	h.mu.Lock()
	h.holds = append(h.holds, r)
	h.mu.Unlock()
}

// AddFault records a fault event at t.
func (h *History) AddFault(id string, kind FaultKind, nodes []int, guard inventory.Guard, event string, t time.Time) {
	r := FaultRecord{Type: "fault", ID: id, Fault: string(kind), Nodes: append([]int{}, nodes...), Guard: string(guard), Event: event, AtNs: h.ns(t)}
	h.mu.Lock()
	h.faults = append(h.faults, r)
	h.mu.Unlock()
}

// AddPause records a client-pause event of guard g at t.
func (h *History) AddPause(id string, g inventory.Guard, scope inventory.PauseScope, event string, t time.Time) {
	r := FaultRecord{Type: "fault", ID: id, Fault: string(fault.ClientPause), Nodes: []int{}, Guard: string(g), Scope: string(scope), Event: event, AtNs: h.ns(t)}
	h.mu.Lock()
	h.faults = append(h.faults, r)
	h.mu.Unlock()
}

// AddOp records guard g's operation op of run runID: sent at started and
// answered at ended with res (both zero: never sent).
func (h *History) AddOp(g inventory.Guard, runID string, op loadgen.Op, res loadgen.Result, started, ended time.Time) {
	r := OpRecord{Type: "op", Guard: string(g), Seq: op.Seq, RequestID: loadgen.RequestID(runID, op.Seq), Key: op.Key,
		Quantity: op.Quantity, DueNs: h.ns(op.Intended), SentNs: -1, EndedNs: -1, Outcome: res.Outcome.String()}
	if !started.IsZero() {
		r.SentNs, r.EndedNs = h.ns(started), h.ns(ended)
	}
	h.mu.Lock()
	h.ops = append(h.ops, r)
	h.mu.Unlock()
}

// Ops returns the operations recorded so far, ordered by when they were
// due.
func (h *History) Ops() []OpRecord {
	h.mu.Lock()
	out := append([]OpRecord(nil), h.ops...)
	h.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].DueNs < out[j].DueNs })
	return out
}

// Holds returns the holds recorded so far, ordered by grant.
func (h *History) Holds() []HoldRecord {
	h.mu.Lock()
	out := append([]HoldRecord(nil), h.holds...)
	h.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].GrantedNs < out[j].GrantedNs })
	return out
}

// Faults returns the fault events recorded so far, in time order.
func (h *History) Faults() []FaultRecord {
	h.mu.Lock()
	out := append([]FaultRecord(nil), h.faults...)
	h.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].AtNs < out[j].AtNs })
	return out
}

// WriteFile writes the history: holds (at their grant), fault events and
// operations (when due) merged in time order.
func (h *History) WriteFile(path string) error {
	type rec struct {
		at  int64
		val any
	}
	var recs []rec
	for _, r := range h.Holds() {
		recs = append(recs, rec{r.GrantedNs, r})
	}
	for _, r := range h.Faults() {
		recs = append(recs, rec{r.AtNs, r})
	}
	for _, r := range h.Ops() {
		recs = append(recs, rec{r.DueNs, r})
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].at < recs[j].at })
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("drill: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err = enc.Encode(r.val); err != nil {
			break
		}
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("drill: write %s: %w", path, err)
	}
	return nil
}

// Records are a history file's records, each kind in file order.
type Records struct {
	Holds  []HoldRecord
	Faults []FaultRecord
	Ops    []OpRecord
}

// ReadRecords reads every record of a history file back.
func ReadRecords(r io.Reader) (Records, error) {
	var out Records
	err := scanRecords(r, "history", func(h *HoldRecord, f *FaultRecord, o *OpRecord) {
		switch {
		case h != nil:
			out.Holds = append(out.Holds, *h)
		case f != nil:
			out.Faults = append(out.Faults, *f)
		default:
			out.Ops = append(out.Ops, *o)
		}
	})
	return out, err
}

// ReadHistory reads a history file back.
func ReadHistory(r io.Reader) (holds []HoldRecord, faults []FaultRecord, err error) {
	err = scanRecords(r, "history", func(h *HoldRecord, f *FaultRecord, _ *OpRecord) {
		switch {
		case h != nil:
			holds = append(holds, *h)
		case f != nil:
			faults = append(faults, *f)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return holds, faults, nil
}

// scanRecords reads the history's records from r, a line at a time, as
// they come: each line is a hold (h set), a fault event (f set) or an
// operation (o set). what names the stream in errors.
func scanRecords(r io.Reader, what string, fn func(h *HoldRecord, f *FaultRecord, o *OpRecord)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(b, &head); err != nil {
			return fmt.Errorf("drill: %s line %d: %w", what, line, err)
		}
		switch head.Type {
		case "hold":
			var h HoldRecord
			if err := json.Unmarshal(b, &h); err != nil {
				return fmt.Errorf("drill: %s line %d: %w", what, line, err)
			}
			fn(&h, nil, nil)
		case "fault":
			var f FaultRecord
			if err := json.Unmarshal(b, &f); err != nil {
				return fmt.Errorf("drill: %s line %d: %w", what, line, err)
			}
			fn(nil, &f, nil)
		case "op":
			var o OpRecord
			if err := json.Unmarshal(b, &o); err != nil {
				return fmt.Errorf("drill: %s line %d: %w", what, line, err)
			}
			fn(nil, nil, &o)
		default:
			return fmt.Errorf("drill: %s line %d: unknown type %q", what, line, head.Type)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("drill: %s: %w", what, err)
	}
	return nil
}

// checkHolds runs the load generator's double-grant checker over guard's
// holds (every guard's when guard is ""): the drill's double grants and lock
// violations, with examples timed from the history's time zero.
func checkHolds(holds []HoldRecord, guard string) *loadgen.HoldChecker {
	zero := time.Unix(0, 0)
	at := func(ns int64) time.Time { return zero.Add(time.Duration(ns)) }
	c := loadgen.NewHoldChecker(zero)
	for _, h := range holds {
		if guard == "" || h.Guard == guard {
			c.Observe(h.Hold(at))
		}
	}
	return c
}

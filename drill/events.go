package drill

import (
	"encoding/json"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/fault"
	"io"
	"strconv"
	"sync"

	"github.com/redlocklab/redlocklab/inventory"
)

// EventWriter is the writing end of the event stream of a drill's `redlab
// serve` process (its --drill-events): the process's lock tenures and
// process pauses as the history's own records (HoldRecord, FaultRecord),
// one JSON object a line, with every *_ns on CLOCK_MONOTONIC, the clock
// the drill shares with the process. The drill reads the stream as it
// comes (scanRecords), puts the times on its own clock and merges the
// records into history.jsonl, as it does with the holds of in-process
// replicas.
//
// Every record is written at once, unbuffered: a process about to stop
// itself must have told the drill before it stops.
type EventWriter struct {
	guard  inventory.Guard
	holder string
	clock  sharedClock

	mu     sync.Mutex
	enc    *json.Encoder
	pauses int
	err    error
}

// NewEventWriter writes the events of a process that runs guard g as holder
// to w.
func NewEventWriter(w io.Writer, g inventory.Guard, holder string) *EventWriter {
	return &EventWriter{guard: g, holder: holder, clock: newSharedClock(), enc: json.NewEncoder(w)}
}

// Hold writes a lock tenure; it is the service's hold observer.
func (w *EventWriter) Hold(h inventory.Hold) {
	w.write(newHoldRecord(w.guard, h, w.clock.mono))
}

// ProcessPause writes the start of a process-scope pause, just before the
// process stops itself; it is the switchboard's notifier
// (inventory.Faults.EnableProcessStop). The one who sends SIGCONT writes
// the end.
func (w *EventWriter) ProcessPause(p inventory.ProcessPause) {
	w.mu.Lock()
	w.pauses++
	n := w.pauses
	w.mu.Unlock()
	w.write(FaultRecord{
		Type: "fault", ID: "client-pause-" + string(w.guard) + "-" + w.holder + "-" + strconv.Itoa(n), Fault: string(fault.ClientPause),
		Nodes: []int{}, Guard: string(w.guard), Scope: string(inventory.ScopeProcess), Event: "start", AtNs: w.clock.mono(p.At),
	})
}

func (w *EventWriter) write(rec any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.enc.Encode(rec); err != nil && w.err == nil {
		w.err = fmt.Errorf("drill: event stream: %w", err)
	}
}

// Err is the first write error: a record the drill did not get.
func (w *EventWriter) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

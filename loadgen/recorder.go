package loadgen

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/redlocklab/redlocklab/loadgen/loadspec"
)

// Histogram geometry. Latencies are in nanoseconds, resolved to three
// significant digits between 1µs and 10 minutes; larger values are recorded
// as the maximum and counted as clamped.
const (
	latencyLowest   = int64(time.Microsecond)
	latencyHighest  = int64(10 * time.Minute)
	attemptsHighest = 1_000_000
	sigFigs         = 3
)

func newLatencyHist() *hdr.Histogram  { return hdr.New(latencyLowest, latencyHighest, sigFigs) }
func newAttemptsHist() *hdr.Histogram { return hdr.New(1, attemptsHighest, sigFigs) }

// Outcome is how one scheduled operation ended.
type Outcome uint8

// Outcomes, in report order. Refused, Unknown, HTTP4xx and HTTP5xx come
// only from a remote target: they tell a request that never arrived (safe to
// retry) from one whose fate is unknown (it may have committed; the store
// audit looks it up) from an answer that is not the API's.
const (
	Reserved    Outcome = iota // the reservation committed
	OutOfStock                 // the SKU had too few units
	Contended                  // the lock was held by someone else until the acquire gave up
	Unavailable                // too few lock nodes answered
	Overloaded                 // the lock client turned the request away at once: its nodes had been too slow for the load
	Fenced                     // the store rejected a stale holder's write
	Conflict                   // an optimistic reservation (db-version) found the row changed on every try
	Error                      // anything else (a store failure, an invalid request, a cancelled operation)
	Refused                    // never arrived: the connection was refused or broke before the request was written
	Unknown                    // sent, no answer (reset, EOF, timeout): it may have committed
	HTTP4xx                    // a 4xx answer that is not the API's (a rate limiter's 429)
	HTTP5xx                    // a 5xx answer that is not the API's (a proxy's 502)
	Late                       // never sent: no in-flight slot within the lateness tolerance
	numOutcomes
)

// outcomeNames are loadspec.Outcomes: the conversion panics at start-up if
// the two ever differ in length.
var outcomeNames = [numOutcomes]string(loadspec.Outcomes)

// String is the outcome's name in summary.json.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// OutcomeNames lists every outcome name in report order.
func OutcomeNames() []string { return outcomeNames[:] }

func parseOutcome(s string) (Outcome, bool) {
	for i, n := range outcomeNames {
		if n == s {
			return Outcome(i), true
		}
	}
	return 0, false
}

// NodeOutcome is one node's answer to one lock SET, as the redlock observer
// reports it.
type NodeOutcome uint8

// Node outcomes, matching redlock.Outcome.
const (
	NodeGranted NodeOutcome = iota
	NodeTaken
	NodeError
	NodeTimeout
	NodeAbandoned
	numNodeOutcomes
)

var nodeOutcomeNames = [numNodeOutcomes]string{"granted", "taken", "error", "timeout", "abandoned"}

// String is the node outcome's name in summary.json.
func (o NodeOutcome) String() string {
	if o < numNodeOutcomes {
		return nodeOutcomeNames[o]
	}
	return fmt.Sprintf("node_outcome(%d)", o)
}

// Histogram tags, in the .hlog and in file names (package loadspec owns
// them). Per-node SET latency is tagged node1, node2, … (see NodeTag).
const (
	TagE2E            = loadspec.TagE2E
	TagE2EUncorrected = loadspec.TagE2EUncorrected
	TagAcquire        = loadspec.TagAcquire
	TagHold           = loadspec.TagHold
	TagRelease        = loadspec.TagRelease
	TagAttempts       = loadspec.TagAttempts
)

// Lock nodes are numbered from 1 wherever a user sees them, as in every
// redlab command: the .hlog tags and .hgrm files (node1, node2, …),
// summary.json per_node, the text and HTML reports, the node<N> threshold
// metrics and the Prometheus node label. Slices, NodeResult.Node and
// redlock.NodeResult.Node are 0-based indexes. nodeNumber and nodeIndex are
// the only conversions between the two.

// maxNodes bounds the node tags read back from a log.
const maxNodes = loadspec.MaxNodes

// nodeNumber is the user-facing number of the node at 0-based index i.
func nodeNumber(i int) int { return i + 1 }

// NodeTag is the tag of the SET latency histogram of the node at 0-based
// index i: node1 for the first node.
func NodeTag(i int) string { return "node" + strconv.Itoa(nodeNumber(i)) }

// nodeIndex is NodeTag's inverse (loadspec.NodeIndex).
func nodeIndex(tag string) (i int, ok bool) { return loadspec.NodeIndex(tag) }

// HistSet is every histogram and counter of one interval (or of a whole run).
// It is not safe for concurrent use; the Recorder guards its shards.
type HistSet struct {
	E2E            *hdr.Histogram // from the intended start: coordinated-omission-correct
	E2EUncorrected *hdr.Histogram // from the actual start
	Acquire        *hdr.Histogram // lock acquire, retries included
	Hold           *hdr.Histogram // lock held: the critical section
	Release        *hdr.Histogram
	Attempts       *hdr.Histogram   // acquire attempts per lock
	Nodes          []*hdr.Histogram // per-node SET latency
	Outcomes       [numOutcomes]int64
	NodeOutcomes   [][numNodeOutcomes]int64
	LateStarts     int64 // sent, but more than the tolerance after the intended start
	Clamped        int64 // latencies beyond the histogram range
	// VersionConflicts are the optimistic tries (db-version) whose write
	// found the row changed since their read, and that were retried or
	// ran out (inventory.Timing.Conflicts).
	VersionConflicts int64
}

// NewHistSet allocates empty histograms for a run against nodes lock nodes.
func NewHistSet(nodes int) *HistSet {
	h := &HistSet{
		E2E: newLatencyHist(), E2EUncorrected: newLatencyHist(),
		Acquire: newLatencyHist(), Hold: newLatencyHist(), Release: newLatencyHist(),
		Attempts:     newAttemptsHist(),
		Nodes:        make([]*hdr.Histogram, nodes),
		NodeOutcomes: make([][numNodeOutcomes]int64, nodes),
	}
	for i := range h.Nodes {
		h.Nodes[i] = newLatencyHist()
	}
	return h
}

// Tagged returns the histograms with their tags, in .hlog order.
func (h *HistSet) Tagged() []TaggedHist {
	out := []TaggedHist{
		{TagE2E, h.E2E}, {TagE2EUncorrected, h.E2EUncorrected},
		{TagAcquire, h.Acquire}, {TagHold, h.Hold}, {TagRelease, h.Release},
		{TagAttempts, h.Attempts},
	}
	for i, n := range h.Nodes {
		out = append(out, TaggedHist{NodeTag(i), n})
	}
	return out
}

// ByTag returns the histogram with the given tag, or nil.
func (h *HistSet) ByTag(tag string) *hdr.Histogram {
	for _, t := range h.Tagged() {
		if t.Tag == tag {
			return t.Hist
		}
	}
	return nil
}

// TaggedHist is a histogram and its .hlog tag.
type TaggedHist struct {
	Tag  string
	Hist *hdr.Histogram
}

// Merge adds o into h. Histograms outside h's range are clamped by the
// library; h must have at least as many nodes as o.
func (h *HistSet) Merge(o *HistSet) {
	mergeHist(h.E2E, o.E2E)
	mergeHist(h.E2EUncorrected, o.E2EUncorrected)
	mergeHist(h.Acquire, o.Acquire)
	mergeHist(h.Hold, o.Hold)
	mergeHist(h.Release, o.Release)
	mergeHist(h.Attempts, o.Attempts)
	h.growNodes(len(o.Nodes))
	for i := range o.Nodes {
		mergeHist(h.Nodes[i], o.Nodes[i])
		for j := range o.NodeOutcomes[i] {
			h.NodeOutcomes[i][j] += o.NodeOutcomes[i][j]
		}
	}
	for i := range o.Outcomes {
		h.Outcomes[i] += o.Outcomes[i]
	}
	h.LateStarts += o.LateStarts
	h.Clamped += o.Clamped
	h.VersionConflicts += o.VersionConflicts
}

func (h *HistSet) growNodes(n int) {
	for len(h.Nodes) < n {
		h.Nodes = append(h.Nodes, newLatencyHist())
		h.NodeOutcomes = append(h.NodeOutcomes, [numNodeOutcomes]int64{})
	}
}

func mergeHist(dst, src *hdr.Histogram) {
	if src.TotalCount() > 0 {
		dst.Merge(src)
	}
}

// Reset empties every histogram and counter, keeping the allocations.
func (h *HistSet) Reset() {
	for _, t := range h.Tagged() {
		if t.Hist.TotalCount() > 0 {
			t.Hist.Reset()
		}
	}
	h.Outcomes = [numOutcomes]int64{}
	for i := range h.NodeOutcomes {
		h.NodeOutcomes[i] = [numNodeOutcomes]int64{}
	}
	h.LateStarts, h.Clamped, h.VersionConflicts = 0, 0, 0
}

// Requests is the number of operations that ended, whatever the outcome.
func (h *HistSet) Requests() int64 {
	var n int64
	for _, c := range h.Outcomes {
		n += c
	}
	return n
}

func (h *HistSet) recordLatency(hist *hdr.Histogram, d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	} else if v > latencyHighest {
		v = latencyHighest
		h.Clamped++
	}
	_ = hist.RecordValue(v) // in range by construction
}

// Sample is what one completed operation contributes.
type Sample struct {
	Outcome        Outcome
	E2E            time.Duration // from the intended start
	E2EUncorrected time.Duration // from the actual start
	LateStart      bool
	Lock           bool // the guard took a lock: the fields below are set
	Acquire        time.Duration
	Hold           time.Duration
	Release        time.Duration
	Attempts       int
	Conflicts      int // optimistic tries lost to a concurrent write
}

// Recorder collects samples from many goroutines. Each worker records into
// the shard it owns (workers beyond the shard count share shards round-robin);
// a shard is a double-buffered HistSet behind its own mutex, so recording is
// an uncontended lock and a few array increments. Collect swaps every shard's
// buffer and merges the filled ones: the HdrHistogram interval-recorder
// pattern, since the histograms themselves are not goroutine-safe.
type Recorder struct {
	shards    []recShard
	nodes     int
	nodeRR    atomic.Uint32
	collectMu sync.Mutex

	// onNodeError is told each node's first error (see OnFirstNodeError);
	// errSeen[i] is set once node i's has been told.
	onNodeError func(node int, err error)
	errSeen     []atomic.Bool
}

type recShard struct {
	mu    sync.Mutex
	cur   *HistSet
	spare *HistSet
	_     [40]byte // keep neighbouring shards' mutexes off one cache line
}

// NewRecorder makes a recorder for nodes lock nodes with the given number of
// shards (0 = one per CPU, at least 2, at most 16).
func NewRecorder(nodes, shards int) *Recorder {
	if shards <= 0 {
		shards = min(max(runtime.GOMAXPROCS(0), 2), 16)
	}
	r := &Recorder{shards: make([]recShard, shards), nodes: nodes, errSeen: make([]atomic.Bool, nodes)}
	for i := range r.shards {
		r.shards[i].cur = NewHistSet(nodes)
		r.shards[i].spare = NewHistSet(nodes)
	}
	return r
}

// Shards is the number of shards; worker w records into shard w % Shards().
func (r *Recorder) Shards() int { return len(r.shards) }

// Nodes is the number of lock nodes the recorder keeps histograms for.
func (r *Recorder) Nodes() int { return r.nodes }

// Record adds one completed operation to the given shard.
func (r *Recorder) Record(shard int, s Sample) {
	sh := &r.shards[shard%len(r.shards)]
	sh.mu.Lock()
	sh.cur.add(s)
	sh.mu.Unlock()
}

// add counts one completed operation.
func (h *HistSet) add(s Sample) {
	h.Outcomes[s.Outcome]++
	h.recordLatency(h.E2E, s.E2E)
	h.recordLatency(h.E2EUncorrected, s.E2EUncorrected)
	if s.LateStart {
		h.LateStarts++
	}
	h.VersionConflicts += int64(s.Conflicts)
	if s.Lock {
		h.recordLatency(h.Acquire, s.Acquire)
		if s.Hold > 0 || s.Release > 0 { // the lock was granted
			h.recordLatency(h.Hold, s.Hold)
			h.recordLatency(h.Release, s.Release)
		}
		if s.Attempts > 0 {
			_ = h.Attempts.RecordValue(int64(min(s.Attempts, attemptsHighest)))
		}
	}
}

// RecordLate counts an operation that was never sent.
func (r *Recorder) RecordLate(shard int) {
	sh := &r.shards[shard%len(r.shards)]
	sh.mu.Lock()
	sh.cur.Outcomes[Late]++
	sh.mu.Unlock()
}

// NodeResult is one node's part of one lock attempt.
type NodeResult struct {
	Node    int
	Outcome NodeOutcome
	Latency time.Duration
}

// RecordNodes adds the per-node results of one lock attempt. Abandoned
// requests (the decision came before the node answered) are counted but have
// no latency.
func (r *Recorder) RecordNodes(results []NodeResult) {
	sh := &r.shards[int(r.nodeRR.Add(1))%len(r.shards)]
	sh.mu.Lock()
	h := sh.cur
	for _, nr := range results {
		if nr.Node < 0 || nr.Node >= len(h.Nodes) || nr.Outcome >= numNodeOutcomes {
			continue
		}
		h.NodeOutcomes[nr.Node][nr.Outcome]++
		if nr.Outcome != NodeAbandoned {
			h.recordLatency(h.Nodes[nr.Node], nr.Latency)
		}
	}
	sh.mu.Unlock()
}

// OnFirstNodeError makes the recorder call f with each lock node's first
// request error (node is the 0-based index), once per node however many
// follow, so that a run against a node that is down says why at once, and
// only once, rather than only counting errors. Set it before recording
// starts.
func (r *Recorder) OnFirstNodeError(f func(node int, err error)) { r.onNodeError = f }

// RecordNodeError reports a failed request to a lock node: the first one
// of each node goes to the OnFirstNodeError function.
func (r *Recorder) RecordNodeError(node int, err error) {
	if r.onNodeError == nil || err == nil || node < 0 || node >= len(r.errSeen) {
		return
	}
	if r.errSeen[node].CompareAndSwap(false, true) {
		r.onNodeError(node, err)
	}
}

// Collect moves everything recorded since the last Collect into dst (which it
// does not reset). Only one Collect runs at a time.
func (r *Recorder) Collect(dst *HistSet) {
	r.collectMu.Lock()
	defer r.collectMu.Unlock()
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		filled := sh.cur
		sh.cur, sh.spare = sh.spare, filled
		sh.mu.Unlock()
		dst.Merge(filled)
		filled.Reset()
	}
}

package loadgen

import (
	"container/heap"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlocklab/redlocklab/inventory"
)

// Safety is the verdict of a run: the two independent checks of the
// architecture. Counts are zero and the matching Checked flag false when the
// target could not be checked (a remote target without --store, the no-op
// target).
type Safety struct {
	// DoubleGrants counts pairs of holds of one key, by different holders'
	// tokens, whose [granted, released) intervals overlap on one clock: what
	// the protected resource sees.
	DoubleGrants int64 `json:"double_grants"`
	// LockViolations counts the double grants whose overlap falls while both
	// holders were still inside their validity ([granted, min(released,
	// valid until))): a failure of the lock itself, as opposed to a holder
	// that outlived its lock (a process pause).
	LockViolations int64 `json:"lock_violations"`
	// LostUpdates is Σ|initial − final − ledger| units over the SKUs.
	LostUpdates int64 `json:"lost_updates"`
	// Oversell is the number of SKUs whose stock went below zero.
	Oversell int64 `json:"oversell"`
	// FencedRejections counts stale holders' writes the store refused.
	FencedRejections int64 `json:"fenced_rejections"`
	// UnknownCommitted and UnknownNotCommitted split the operations whose
	// outcome was unknown (sent, never answered) by what the ledger says
	// became of them; zero unless AuditChecked.
	UnknownCommitted    int64 `json:"unknown_committed"`
	UnknownNotCommitted int64 `json:"unknown_not_committed"`

	DoubleGrantsChecked bool `json:"double_grants_checked"`
	AuditChecked        bool `json:"audit_checked"`
	// Examples are the first double grants found, for the report.
	Examples []DoubleGrant `json:"examples,omitempty"`
}

// Add merges o into s (runs from several load machines).
func (s *Safety) Add(o Safety) {
	s.DoubleGrants += o.DoubleGrants
	s.LockViolations += o.LockViolations
	s.LostUpdates += o.LostUpdates
	s.Oversell += o.Oversell
	s.FencedRejections += o.FencedRejections
	s.UnknownCommitted += o.UnknownCommitted
	s.UnknownNotCommitted += o.UnknownNotCommitted
	s.DoubleGrantsChecked = s.DoubleGrantsChecked || o.DoubleGrantsChecked
	s.AuditChecked = s.AuditChecked || o.AuditChecked
	for _, e := range o.Examples {
		if len(s.Examples) < maxExamples {
			s.Examples = append(s.Examples, e)
		}
	}
}

// Violations is the total of every safety count.
func (s Safety) Violations() int64 {
	return s.DoubleGrants + s.LostUpdates + s.Oversell
}

// DoubleGrant is one overlap the checker found.
type DoubleGrant struct {
	Key string `json:"key"`
	// LockViolation is set when both holders were inside their validity
	// during the overlap.
	LockViolation bool     `json:"lock_violation,omitempty"`
	First         HoldSpan `json:"first"`
	Second        HoldSpan `json:"second"`
}

// HoldSpan is a hold in a report: times are offsets from the run start.
type HoldSpan struct {
	Holder       string  `json:"holder"`
	Token        string  `json:"token,omitempty"`
	GrantedMs    float64 `json:"granted_ms"`
	ReleasedMs   float64 `json:"released_ms"`
	ValidUntilMs float64 `json:"valid_until_ms"`
}

const (
	maxExamples = 20
	// reorderWindow is how late a hold may be reported, after its release,
	// and still be checked exactly. The service reports a hold after its
	// release call returns (which may take its release timeout, 2s), so
	// this is a few seconds; holds wait that long in a heap ordered by
	// release time before they are checked.
	reorderWindow = 5 * time.Second
	// pairWindow bounds the earlier holds one hold is compared with.
	pairWindow = 8
)

// HoldChecker counts double grants incrementally: pairs of holds of one key,
// by different tokens, whose [granted, released) intervals overlap. Holds are
// checked in release order, so a hold [g, r) overlaps an earlier-released
// one exactly when g is before that one's release; only the last pairWindow
// releases of a key can still be open at g, so memory is a few entries per
// key plus the holds of the last reorderWindow waiting in a heap. A hold
// overlapping more than pairWindow earlier ones counts pairWindow pairs.
// Safe for concurrent use.
type HoldChecker struct {
	base       time.Time
	count      atomic.Int64
	violations atomic.Int64

	mu        sync.Mutex
	pending   holdHeap
	watermark int64 // latest release reported, ns from base
	keys      map[string]*keyState
	examples  []DoubleGrant
}

// keyState holds the last holds checked on a key, in release order.
type keyState struct {
	recent [pairWindow]span
	n      int // filled entries
	next   int // ring position of the next entry
}

type span struct {
	key           string
	g, r, v       int64 // ns from base; v = min(valid until, r)
	holder, token string
}

// NewHoldChecker measures hold times from base (the run start).
func NewHoldChecker(base time.Time) *HoldChecker {
	return &HoldChecker{base: base, keys: make(map[string]*keyState)}
}

// Observe records one hold; it is checked once no earlier-released hold can
// still be reported (reorderWindow later), or at Flush.
func (c *HoldChecker) Observe(h inventory.Hold) {
	s := span{key: h.Key, g: int64(h.Granted.Sub(c.base)), r: int64(h.Released.Sub(c.base)), holder: h.Holder, token: h.Token}
	if h.Released.IsZero() || s.r < s.g {
		s.r = s.g
	}
	s.v = s.r
	if !h.ValidUntil.IsZero() {
		s.v = max(min(s.v, int64(h.ValidUntil.Sub(c.base))), s.g)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	heap.Push(&c.pending, s)
	if s.r > c.watermark {
		c.watermark = s.r
	}
	for len(c.pending) > 0 && c.pending[0].r < c.watermark-int64(reorderWindow) {
		c.check(heap.Pop(&c.pending).(span))
	}
}

// Flush checks every hold still waiting; call it once the run has drained.
func (c *HoldChecker) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pending) > 0 {
		c.check(heap.Pop(&c.pending).(span))
	}
}

func (c *HoldChecker) check(s span) {
	ks := c.keys[s.key]
	if ks == nil {
		ks = &keyState{}
		c.keys[s.key] = ks
	}
	// Every earlier-released hold still open at s's grant is one pair. Only
	// the last pairWindow holds can be: any older one was released before
	// all of them. The full interval test keeps a hold reported later than
	// the reorder window from matching holds that came after it.
	for i := 0; i < ks.n; i++ {
		p := ks.recent[i]
		if s.g < p.r && p.g < s.r && p.token != s.token {
			c.count.Add(1)
			violation := s.g < p.v && p.g < s.v
			if violation {
				c.violations.Add(1)
			}
			if len(c.examples) < maxExamples {
				c.examples = append(c.examples, DoubleGrant{Key: s.key, LockViolation: violation, First: p.report(), Second: s.report()})
			}
		}
	}
	ks.recent[ks.next] = s
	ks.next = (ks.next + 1) % pairWindow
	if ks.n < pairWindow {
		ks.n++
	}
}

func (s span) report() HoldSpan {
	return HoldSpan{Holder: s.holder, Token: s.token, GrantedMs: float64(s.g) / 1e6, ReleasedMs: float64(s.r) / 1e6, ValidUntilMs: float64(s.v) / 1e6}
}

// DoubleGrants is the number of double grants found so far (holds still in
// the reorder window are not counted until checked).
func (c *HoldChecker) DoubleGrants() int64 { return c.count.Load() }

// LockViolations is the number of double grants found so far whose overlap
// fell inside both holders' validity.
func (c *HoldChecker) LockViolations() int64 { return c.violations.Load() }

// Examples returns the first double grants found.
func (c *HoldChecker) Examples() []DoubleGrant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]DoubleGrant(nil), c.examples...)
}

// holdHeap orders holds by release time.
type holdHeap []span

func (h holdHeap) Len() int           { return len(h) }
func (h holdHeap) Less(i, j int) bool { return h[i].r < h[j].r }
func (h holdHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *holdHeap) Push(x any)        { *h = append(*h, x.(span)) }
func (h *holdHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

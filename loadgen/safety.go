package loadgen

import (
	"slices"
	"sort"
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

// Violations is what the threshold safety.violations judges: double grants,
// lost updates and oversold SKUs summed. Reports name the counts one by one
// instead.
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

// maxExamples is how many double grants a verdict keeps for the report.
const maxExamples = 20

// HoldChecker is the one double-grant checker, of `redlab load` and `redlab
// drill` alike. It counts, exactly, every pair of holds of one key by
// different tokens whose [granted, released) intervals overlap (a double
// grant), and among them the pairs whose overlap falls while both holders
// were inside their validity ([granted, min(released, valid until)) overlap
// too: a lock violation).
//
// Holds may be observed in any order (the service reports one after its
// release, a drill replays its history): a pair is counted once, when the
// later observed of its two holds arrives, so the counts are exact for the
// holds observed so far at every moment, and live counts only grow. Per key
// the checker keeps the holds sorted by grant and the longest tenure seen:
// a new hold [g, r) can only overlap those granted in (g − longest, r), so
// it is compared with the holds that could overlap it, not with all of the
// key's. Memory is one entry per hold. Safe for concurrent use.
type HoldChecker struct {
	base       time.Time
	count      atomic.Int64
	violations atomic.Int64

	mu       sync.Mutex
	keys     map[string]*keyHolds
	examples []DoubleGrant
}

// keyHolds are the holds of one key observed so far.
type keyHolds struct {
	byGrant []span // sorted by g, ties in arrival order
	longest int64  // the largest r − g among them
}

type span struct {
	g, r, v       int64 // ns from base; v = min(valid until, r), at least g
	holder, token string
}

// NewHoldChecker measures hold times from base (the run start).
func NewHoldChecker(base time.Time) *HoldChecker {
	return &HoldChecker{base: base, keys: make(map[string]*keyHolds)}
}

// Observe checks one hold against every hold of its key observed before it.
// A hold without a release counts as an instant at its grant; one without a
// validity is valid until released.
func (c *HoldChecker) Observe(h inventory.Hold) {
	s := span{g: int64(h.Granted.Sub(c.base)), r: int64(h.Released.Sub(c.base)), holder: h.Holder, token: h.Token}
	if h.Released.IsZero() || s.r < s.g {
		s.r = s.g
	}
	s.v = s.r
	if !h.ValidUntil.IsZero() {
		s.v = max(min(s.v, int64(h.ValidUntil.Sub(c.base))), s.g)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.keys[h.Key]
	if k == nil {
		k = &keyHolds{}
		c.keys[h.Key] = k
	}
	// Holds granted at or after s's release do not overlap it; going back
	// from there, one granted longest or more before s's grant was released
	// by then, and so was every hold before it.
	hi := sort.Search(len(k.byGrant), func(i int) bool { return k.byGrant[i].g >= s.r })
	for i := hi - 1; i >= 0 && k.byGrant[i].g+k.longest > s.g; i-- {
		if p := k.byGrant[i]; p.r > s.g && p.g < s.r && p.token != s.token {
			c.pair(h.Key, p, s)
		}
	}
	at := sort.Search(len(k.byGrant), func(i int) bool { return k.byGrant[i].g > s.g })
	k.byGrant = slices.Insert(k.byGrant, at, s)
	k.longest = max(k.longest, s.r-s.g)
}

// pair counts the double grant of a and b, which overlap.
func (c *HoldChecker) pair(key string, a, b span) {
	c.count.Add(1)
	violation := a.g < b.v && b.g < a.v
	if violation {
		c.violations.Add(1)
	}
	if len(c.examples) < maxExamples {
		if b.g < a.g {
			a, b = b, a
		}
		c.examples = append(c.examples, DoubleGrant{Key: key, LockViolation: violation, First: a.report(), Second: b.report()})
	}
}

func (s span) report() HoldSpan {
	return HoldSpan{Holder: s.holder, Token: s.token, GrantedMs: float64(s.g) / 1e6, ReleasedMs: float64(s.r) / 1e6, ValidUntilMs: float64(s.v) / 1e6}
}

// DoubleGrants is the number of double grants among the holds observed so
// far.
func (c *HoldChecker) DoubleGrants() int64 { return c.count.Load() }

// LockViolations is the number of those double grants whose overlap fell
// inside both holders' validity.
func (c *HoldChecker) LockViolations() int64 { return c.violations.Load() }

// Examples returns the first double grants found (at most 20), the earlier
// granted hold of each first.
func (c *HoldChecker) Examples() []DoubleGrant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]DoubleGrant(nil), c.examples...)
}

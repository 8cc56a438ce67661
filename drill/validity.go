package drill

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/loadgen"
)

// A drill is judged only when the host kept its schedule before the first
// fault, as etcd's robustness tests call a run invalid whose traffic
// before the failpoint fell below its profile's minimum: every guard must
// have served at least MinServedShare of the operations due in that span,
// each sent within ServedWithin of when it was due and answered by the
// service's logic (reserved, out of stock, contended, fenced, a version
// conflict). A guard that was not served so is a host too busy to run the
// drill (its generator late, its lock client overloaded, its requests
// timing out with no fault in force), not a lock that failed: the drill is
// INVALID, neither passed nor failed.
const (
	MinServedShare = 0.9
	ServedWithin   = 250 * time.Millisecond
	// minDue is the fewest operations due before the first fault that a
	// guard's validity is judged on; with fewer, the span is too short to
	// tell and the guard counts as valid.
	minDue = 10
)

// Served is one guard's load before the first fault: the operations due
// then and answered before it (or never sent in time).
type Served struct {
	Due    int64 `json:"due"`
	Served int64 `json:"served"`
	// Late were never sent, or sent later than ServedWithin; Refused were
	// sent but answered unavailable, overloaded or with an error.
	Late    int64 `json:"late"`
	Refused int64 `json:"refused"`
}

// Share is the share of the due operations served.
func (s Served) Share() float64 {
	if s.Due == 0 {
		return 1
	}
	return float64(s.Served) / float64(s.Due)
}

// servedOutcomes are the answers of the service's logic.
var servedOutcomes = map[loadgen.Outcome]bool{
	loadgen.Reserved: true, loadgen.OutOfStock: true, loadgen.Contended: true, loadgen.Fenced: true, loadgen.Conflict: true,
}

// servedBefore counts the operations due in [0, before) (ns since t0).
// One still in flight at before is left out: the fault may have held it
// up, and it says nothing of the host.
func servedBefore(ops []opRecord, t0 time.Time, before int64) Served {
	var s Served
	for _, o := range ops {
		if int64(o.op.Intended.Sub(t0)) >= before {
			continue
		}
		switch {
		case o.started.IsZero() || o.started.Sub(o.op.Intended) > ServedWithin:
			s.Late++
		case int64(o.ended.Sub(t0)) > before:
			continue
		case !servedOutcomes[o.res.Outcome]:
			s.Refused++
		default:
			s.Served++
		}
		s.Due++
	}
	return s
}

// invalidReason says why the drill cannot be judged, or "".
func invalidReason(served map[string]Served, before time.Duration) string {
	var short []string
	for g, s := range served {
		if s.Due >= minDue && s.Share() < MinServedShare {
			short = append(short, fmt.Sprintf("%s served %d of %d (%.0f%%: %d late, %d unavailable, overloaded or failed)",
				g, s.Served, s.Due, s.Share()*100, s.Late, s.Refused))
		}
	}
	if len(short) == 0 {
		return ""
	}
	sort.Strings(short)
	return fmt.Sprintf("the host could not keep the schedule: in the %v before the first fault, %s; under %.0f%% served on time with no fault in force is a host too busy to run the drill, not a lock that failed: run it again on a quieter machine",
		before.Round(100*time.Millisecond), strings.Join(short, "; "), MinServedShare*100)
}

package drill

import (
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/loadgen"
)

// TestValidity: operations due before the first fault are served when sent
// on time and answered by the service; one still in flight at the fault is
// left out; a guard served under 90 % makes the drill INVALID, and the
// reason says the host could not keep the schedule.
func TestValidity(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	op := func(due, sent, ended int, o loadgen.Outcome) opRecord {
		r := opRecord{op: loadgen.Op{Intended: at(due)}, res: loadgen.Result{Outcome: o}}
		if sent >= 0 {
			r.started, r.ended = at(sent), at(ended)
		}
		return r
	}
	before := int64(2 * time.Second)
	var ops []opRecord
	for i := range 18 {
		ops = append(ops, op(i*100, i*100+1, i*100+5, loadgen.Reserved))
	}
	ops = append(ops,
		op(1850, 1851, 2500, loadgen.Unavailable),      // in flight at the fault: left out
		op(1900, -1, -1, loadgen.Late),                 // never sent
		op(1950, 1950+400, 1950+410, loadgen.Reserved), // sent too late
		op(2100, 2101, 2105, loadgen.Reserved),         // after the fault
	)
	s := servedBefore(ops, t0, before)
	if s.Due != 20 || s.Served != 18 || s.Late != 2 || s.Refused != 0 {
		t.Fatalf("served %+v: want 20 due, 18 served, 2 late", s)
	}
	if r := invalidReason(map[string]Served{"redlock": s}, 2*time.Second); r != "" {
		t.Errorf("90%% served: got invalid %q, want valid", r)
	}
	ops = append(ops, op(1960, 1961, 1970, loadgen.Overloaded), op(1970, 1971, 1980, loadgen.Error))
	s = servedBefore(ops, t0, before)
	r := invalidReason(map[string]Served{"redlock": s, "etcd": {Due: 5}}, 2*time.Second)
	if !strings.Contains(r, "the host could not keep the schedule") || !strings.Contains(r, "redlock served 18 of 22") || strings.Contains(r, "etcd") {
		t.Errorf("18 of 22 served: got %q, want an INVALID reason naming redlock alone (etcd had too few due to judge)", r)
	}
}

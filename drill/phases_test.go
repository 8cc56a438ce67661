package drill

import (
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/inventory"
)

func TestPhaseSpans(t *testing.T) {
	s := time.Second.Nanoseconds()
	faults := []FaultRecord{
		{ID: "a", Event: "start", AtNs: 10 * s}, {ID: "b", Event: "start", AtNs: 12 * s},
		{ID: "a", Event: "end", AtNs: 15 * s}, {ID: "b", Event: "end", AtNs: 14 * s},
	}
	sp := phaseSpans(faults, 40*s)
	if sp[PhaseBefore] != (Span{0, 10 * s}) || sp[PhaseDuring] != (Span{10 * s, 15 * s}) || sp[PhaseAfter] != (Span{15 * s, 40 * s}) {
		t.Errorf("got %+v", sp)
	}
	for ns, want := range map[int64]Phase{0: PhaseBefore, 10*s - 1: PhaseBefore, 10 * s: PhaseDuring, 15 * s: PhaseDuring, 15*s + 1: PhaseAfter} {
		if got := phaseOf(sp, ns); got != want {
			t.Errorf("phaseOf(%d): got %s, want %s", ns, got, want)
		}
	}
	// A fault never ended lasts until the end of the load.
	sp = phaseSpans(faults[:3], 40*s)
	if sp[PhaseDuring] != (Span{10 * s, 40 * s}) {
		t.Errorf("open fault: got %+v", sp[PhaseDuring])
	}
	// No fault: everything is before.
	sp = phaseSpans(nil, 40*s)
	if sp[PhaseBefore] != (Span{0, 40 * s}) || phaseOf(sp, 39*s) != PhaseBefore {
		t.Errorf("no faults: got %+v", sp)
	}
	// An instantaneous fault: during is that instant.
	sp = phaseSpans([]FaultRecord{{ID: "j", Event: "start", AtNs: 5 * s}, {ID: "j", Event: "end", AtNs: 5 * s}}, 40*s)
	if phaseOf(sp, 5*s) != PhaseDuring || phaseOf(sp, 5*s+1) != PhaseAfter {
		t.Errorf("instant fault: got %+v", sp)
	}
}

func TestFullEffect(t *testing.T) {
	s := time.Second.Nanoseconds()
	faults := []FaultRecord{
		{ID: "a", Event: "start", AtNs: 10 * s}, {ID: "b", Event: "start", AtNs: 10*s + 40}, {ID: "c", Event: "start", AtNs: 10*s + 80},
		{ID: "b", Event: "end", AtNs: 18 * s}, {ID: "a", Event: "end", AtNs: 18*s + 50}, {ID: "c", Event: "end", AtNs: 18*s + 90},
	}
	if got, want := fullEffect(faults, 30*s), (Span{10*s + 80, 18 * s}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// One fault never ended: it holds until the end.
	if got, want := fullEffect(faults[:3], 30*s), (Span{10*s + 80, 30 * s}); got != want {
		t.Errorf("open faults: got %+v, want %+v", got, want)
	}
	// Faults one after the other never all hold.
	seq := []FaultRecord{{ID: "a", Event: "start", AtNs: 1}, {ID: "a", Event: "end", AtNs: 2}, {ID: "b", Event: "start", AtNs: 3}, {ID: "b", Event: "end", AtNs: 4}}
	if sp := fullEffect(seq, 30*s); sp.EndNs >= sp.StartNs {
		t.Errorf("sequential faults: got %+v, want an empty span", sp)
	}
}

// TestFaultsReaching: each guard's phases come from the faults that reach
// it; a control gets them all.
func TestFaultsReaching(t *testing.T) {
	s := time.Second.Nanoseconds()
	faults := []FaultRecord{
		{ID: "n", Fault: "kill", Nodes: []int{2}, Event: "start", AtNs: 10 * s},
		{ID: "m", Fault: "kill", Nodes: []int{}, EtcdMember: 2, Event: "start", AtNs: 10 * s},
		{ID: "n", Fault: "kill", Nodes: []int{2}, Event: "end", AtNs: 20 * s},
		{ID: "m", Fault: "kill", Nodes: []int{}, EtcdMember: 2, Event: "end", AtNs: 23 * s},
		{ID: "p", Fault: "client-pause", Nodes: []int{}, Guard: "db-version", Event: "start", AtNs: 4 * s},
		{ID: "p", Fault: "client-pause", Nodes: []int{}, Guard: "db-version", Event: "end", AtNs: 6 * s},
	}
	ids := func(rs []FaultRecord) string {
		var out []string
		for _, r := range rs {
			if r.Event == "start" {
				out = append(out, r.ID)
			}
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		guard inventory.Guard
		want  string
		span  Span
	}{
		{inventory.GuardRedlock, "n", Span{10 * s, 20 * s}},
		{inventory.GuardEtcdFenced, "m", Span{10 * s, 23 * s}},
		{inventory.GuardDBVersion, "p", Span{4 * s, 6 * s}},
		// db-atomic is only a control beside these: every fault.
		{inventory.GuardDBAtomic, "n,m,p", Span{4 * s, 23 * s}},
	} {
		got := faultsReaching(faults, tc.guard)
		if ids(got) != tc.want {
			t.Errorf("%s: got faults %s, want %s", tc.guard, ids(got), tc.want)
		}
		if sp := phaseSpans(got, 40*s)[PhaseDuring]; sp != tc.span {
			t.Errorf("%s: during %+v, want %+v", tc.guard, sp, tc.span)
		}
	}
}

// A drill's expectations: the conditions each guard must meet, judged on
// the whole run, a phase or a window.

package spec

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen/loadspec"
)

// Expectation is one condition a guard must meet: a load-generator threshold
// (loadspec.ParseThreshold's grammar, with safety.lock_violations), judged on
// the whole run or, with a phase prefix (during.outcomes.unavailable<1%), on
// the operations due in that phase. Beyond that grammar:
//
//	during.grants==0      locks granted in a phase (from the history); for
//	                      during, only while every fault that reaches the
//	                      guard was in force (from the last start to the
//	                      first end), so that a fault applied or healed node
//	                      by node does not count the instants when only part
//	                      of it held
//	recovery<2s           from the end of the faults that reach the guard to
//	                      its first grant after it
//	during.acquire.p99<=2*before.acquire.p99
//	                      a value relative to another phase's figure
type Expectation struct {
	Expr  string
	Phase Phase
	// Threshold is the parsed condition without its phase prefix, for a
	// figure of the load generator's.
	Threshold loadspec.Threshold
	// Grants and Recovery are the drill's own figures, held to Cmp.
	Grants   bool
	Recovery bool
	Cmp      loadspec.Comparison
	// Ref, when set, makes the expectation relative: Metric Cmp.Op Factor
	// times Ref's figure in phase Refs.
	Metric loadspec.Metric
	Ref    *loadspec.Metric
	Refs   Phase
	Factor float64
	Line   int
}

func (p *specParser) expectations(e entry, s *Spec) {
	g, err := inventory.ParseAnyGuard(e.key)
	if err != nil || !contains(s.Workload.Guards, g) {
		p.fail(e.keyNode, e.field, "not a guard of this drill's workload (%s)", inventory.JoinGuards(s.Workload.Guards))
		return
	}
	items := p.list(e)
	if len(items) == 0 {
		p.fail(e.keyNode, e.field, "no expectations: a drill states what each guard it names must show")
	}
	for _, it := range items {
		v, ok := p.scalar(it)
		if !ok {
			return
		}
		x, err := ParseExpectation(v, s.Lab.Nodes, s.windowNames()...)
		if err != nil {
			p.fail(it.node, it.field, "%s", trimPkg(err))
			return
		}
		x.Line = p.line(it.node)
		s.Expect[g] = append(s.Expect[g], x)
	}
}

// windowNames are the names of the spec's windows.
func (s *Spec) windowNames() []Phase {
	out := make([]Phase, len(s.Windows))
	for i, w := range s.Windows {
		out[i] = w.Name
	}
	return out
}

// cutPhase splits a phase or window prefix ("during.", "slow.") off rest.
func cutPhase(rest string, windows []Phase) (Phase, string) {
	for _, ph := range append(append([]Phase{}, Phases...), windows...) {
		if r, ok := strings.CutPrefix(rest, string(ph)+"."); ok {
			return ph, r
		}
	}
	return PhaseAll, rest
}

// ParseExpectation parses one expectation against a lab of nodes nodes and
// the spec's windows (named phases a prefix may name besides before,
// during and after).
func ParseExpectation(expr string, nodes int, windows ...Phase) (Expectation, error) {
	x := Expectation{Expr: strings.TrimSpace(expr)}
	var rest string
	x.Phase, rest = cutPhase(x.Expr, windows)
	if r, ok := strings.CutPrefix(rest, "grants"); ok && x.Phase != PhaseAll && (r == "" || strings.ContainsAny(r[:1], "<>=! ")) {
		c, err := loadspec.ParseComparison(r, false)
		if err != nil {
			return x, fmt.Errorf("expectation %q: want %s.grants OP COUNT", expr, x.Phase)
		}
		x.Cmp, x.Grants = c, true
		return x, nil
	}
	if r, ok := strings.CutPrefix(rest, "recovery"); ok && x.Phase == PhaseAll && r != "" && strings.ContainsAny(r[:1], "<>=! ") {
		if _, err := loadspec.ParseComparison(r, false); err == nil {
			return x, fmt.Errorf("expectation %q: recovery is a duration: give a unit, like 2s", expr)
		}
		c, err := loadspec.ParseComparison(r, true)
		if err != nil {
			return x, fmt.Errorf("expectation %q: want recovery OP DURATION, like recovery<2s", expr)
		}
		x.Cmp, x.Recovery = c, true
		return x, nil
	}
	if m := relativeRE.FindStringSubmatch(rest); m != nil {
		// METRIC OP K*[PHASE.]METRIC2: two metrics of the threshold grammar.
		refPhase, refMetric := cutPhase(m[4], windows)
		lhs, err := loadspec.ParseMetric(m[1])
		if err != nil {
			return x, fmt.Errorf("expectation %q: %w", expr, err)
		}
		ref, err := loadspec.ParseMetric(refMetric)
		if err != nil {
			return x, fmt.Errorf("expectation %q: %w", expr, err)
		}
		if refPhase == PhaseAll {
			refPhase = x.Phase
		}
		if lhs.IsSafety() || ref.IsSafety() {
			return x, fmt.Errorf("expectation %q: safety counts take a plain number", expr)
		}
		k, _ := strconv.ParseFloat(m[3], 64)
		x.Metric, x.Cmp.Op, x.Ref, x.Refs, x.Factor = lhs, m[2], &ref, refPhase, k
		return x, nil
	}
	if m := nodeMetricRE.FindStringSubmatch(rest); m != nil {
		if n, _ := strconv.Atoi(m[1]); n > nodes {
			return x, fmt.Errorf("expectation %q: node%d is out of range: the lab has nodes 1-%d", expr, n, nodes)
		}
	}
	t, err := loadspec.ParseThreshold(rest)
	if err != nil {
		return x, err
	}
	if x.Phase != PhaseAll && t.ParsedMetric().IsSafety() {
		return x, fmt.Errorf("expectation %q: safety counts are judged on the whole drill (drop %q)", expr, string(x.Phase)+".")
	}
	x.Threshold = t
	return x, nil
}

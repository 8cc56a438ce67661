package loadgen

import "time"

// PhaseReport is the Report of a slice of a run, built from the operations
// themselves rather than from a run directory: a drill splits its runs into
// before, during and after its faults, and judges each part with the same
// thresholds a run is judged by. Add operations, then call Finish.
type PhaseReport struct {
	Report
}

// NewPhaseReport starts an empty report of the slice [start, end) of a run
// against nodes lock nodes.
func NewPhaseReport(nodes int, start, end time.Time) *PhaseReport {
	p := &PhaseReport{Report: Report{Totals: NewHistSet(nodes)}}
	p.Meta.Started, p.Meta.Ended = start, end
	return p
}

// Add counts one operation that was due at intended and ended at ended
// (lateness is not judged here: Late and LateStart come from the run).
func (p *PhaseReport) Add(op Op, res Result, ended time.Time) {
	p.Totals.add(Sample{
		Outcome: res.Outcome, E2E: ended.Sub(op.Intended), E2EUncorrected: ended.Sub(op.Intended),
		Lock: res.Lock, Acquire: res.Acquire, Hold: res.Hold, Release: res.Release, Attempts: res.Attempts,
		Conflicts: res.Conflicts,
	})
}

// Finish computes the summary with the given safety counts; thresholds can
// be judged afterwards with Judge.
func (p *PhaseReport) Finish(s Safety) {
	p.Safety = s
	p.Summary = buildSummary(&p.Report)
}

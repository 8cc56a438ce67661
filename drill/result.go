package drill

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/redlocklab/redlocklab/drill/spec"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
	"github.com/redlocklab/redlocklab/redlock"
)

// Result is result.json: a drill's verdict with the counts behind it.
type Result struct {
	Drill string `json:"drill"`
	Title string `json:"title,omitempty"`
	Seed  uint64 `json:"seed"`
	// Passed: every expectation held. It means nothing when Invalid is
	// set.
	Passed bool `json:"passed"`
	// Invalid, when set, says why the run cannot be judged: the host did
	// not keep the schedule before the first fault (validity.go). The
	// drill is then neither passed nor failed.
	Invalid string `json:"invalid,omitempty"`
	// Served is each guard's load before the first fault, which validity
	// is judged on.
	Served map[string]Served `json:"served,omitempty"`
	// Disagreements name the guards whose two checkers of the protected
	// resource, the store's audit and the model checker, disagree on lost
	// updates: one of them is wrong, and the drill does not pass.
	Disagreements []string `json:"disagreements,omitempty"`
	Started       string   `json:"started"`
	DurationS     float64  `json:"duration_s"`
	Lab           LabInfo  `json:"lab"`
	// Transport is how the faults reached the nodes: "ssh" on real hosts
	// (TransportSSH); absent in the lab.
	Transport string `json:"transport,omitempty"`
	// LeftOut are the spec's guards that did not run: on hosts and on a lab
	// of machines, those that lock on etcd members, which a hosts
	// inventory does not list and machines do not run (Spec.WithoutEtcd).
	LeftOut []string `json:"left_out,omitempty"`
	// Phases are the bounds of before, during and after, and of the spec's
	// windows, in ns since the start of the load (the history's clock).
	Phases map[Phase]Span `json:"phases"`
	// Guards maps each guard to its verdict.
	Guards map[string]*GuardResult `json:"guards"`
	// GuardOrder is the workload's order of the guards.
	GuardOrder []string `json:"guard_order"`
	// Faults are the spec's faults as scheduled, in time order.
	Faults []FaultInfo `json:"faults"`
	// PowerLossModel is the model the drill's power losses ran on
	// (lab.PowerLossFilesystem), when it had any.
	PowerLossModel string `json:"power_loss_model,omitempty"`
}

// FaultInfo is one scheduled fault of a drill.
type FaultInfo struct {
	AtS   float64 `json:"at_s"`
	Fault string  `json:"fault"`
	// Scope is a client-pause's: request or process.
	Scope string `json:"scope,omitempty"`
	// Desc is the fault as the drill's log shows it.
	Desc string `json:"desc"`
}

// LabInfo is the lab profile a drill ran on.
type LabInfo struct {
	Nodes          int      `json:"nodes"`
	Persistence    []string `json:"persistence"`
	RestartDelayMs float64  `json:"restart_delay_ms"`
	// Replicas is 1 when every node had an asynchronous replica.
	Replicas int `json:"replicas,omitempty"`
	// Machines: every node was a systemd-nspawn machine.
	Machines bool `json:"machines,omitempty"`
	// TLS: every node was TLS-only.
	TLS bool `json:"tls,omitempty"`
	// PlainDisks: the data directories were plain ones, not the power-loss
	// filesystem; a drill without a power loss runs on them, so that the
	// layer does not weigh on its latency (profile.Profile.PowerLoss off).
	PlainDisks bool `json:"plain_disks,omitempty"`
	// EtcdUnsafeNoFsync: the etcd members never fsynced, a declared
	// negative control (lab.Config.EtcdUnsafeNoFsync).
	EtcdUnsafeNoFsync bool `json:"etcd_unsafe_no_fsync,omitempty"`
}

// Span is a phase's bounds: [StartNs, EndNs).
type Span struct {
	StartNs int64 `json:"start_ns"`
	EndNs   int64 `json:"end_ns"`
}

// GuardResult is one guard's verdict.
type GuardResult struct {
	Passed bool   `json:"passed"`
	Counts Counts `json:"counts"`
	// Phases splits the operations by when they were due and the grants by
	// when they were made.
	Phases map[Phase]PhaseResult `json:"phases"`
	// Spans are the bounds of the guard's phases: those of the faults that
	// reach it (faultsReaching), which may differ from the drill's.
	Spans          map[Phase]Span `json:"spans"`
	AcquireP50Ms   float64        `json:"acquire_p50_ms"`
	AcquireP99Ms   float64        `json:"acquire_p99_ms"`
	ThroughputPerS float64        `json:"throughput_per_s"`
	// Availability is the share of requests that got an answer from the
	// service's logic (not unavailable, not overloaded, not an error).
	Availability float64             `json:"availability"`
	Expectations []ExpectationResult `json:"expectations"`
	// RunDir is the guard's load run directory, relative to the drill's.
	RunDir string `json:"run_dir"`
	// Processes is how many `redlab serve` processes ran the guard's
	// replicas (a client-pause with scope process); 0: they ran inside the
	// drill.
	Processes int `json:"processes,omitempty"`
	// Model is the model checker's verdict on the guard's operations.
	Model *Model `json:"model,omitempty"`
}

// Counts are a guard's safety counts and outcomes over the whole drill.
type Counts struct {
	DoubleGrants     int64 `json:"double_grants"`
	LockViolations   int64 `json:"lock_violations"`
	LostUpdates      int64 `json:"lost_updates"`
	Oversell         int64 `json:"oversell"`
	FencedRejections int64 `json:"fenced_rejections"`
	Requests         int64 `json:"requests"`
	Reserved         int64 `json:"reserved"`
	OutOfStock       int64 `json:"out_of_stock"`
	Contended        int64 `json:"contended"`
	Unavailable      int64 `json:"unavailable"`
	// Overloaded are the requests the lock client's overload control
	// turned away unsent.
	Overloaded int64 `json:"overloaded"`
	Fenced     int64 `json:"fenced"`
	// VersionConflict are the requests db-version gave up on, out of
	// tries; VersionConflicts the tries it lost, retried or not.
	VersionConflict  int64 `json:"version_conflict"`
	VersionConflicts int64 `json:"version_conflicts"`
	Error            int64 `json:"error"`
	Late             int64 `json:"late"`
	Grants           int64 `json:"grants"`
}

// PhaseResult is one phase of a guard.
type PhaseResult struct {
	Requests    int64 `json:"requests"`
	Reserved    int64 `json:"reserved"`
	OutOfStock  int64 `json:"out_of_stock"`
	Contended   int64 `json:"contended"`
	Unavailable int64 `json:"unavailable"`
	Overloaded  int64 `json:"overloaded"`
	Fenced      int64 `json:"fenced"`
	// VersionConflict: requests db-version gave up on, out of tries.
	VersionConflict int64   `json:"version_conflict"`
	Error           int64   `json:"error"`
	Grants          int64   `json:"grants"`
	AcquireP50Ms    float64 `json:"acquire_p50_ms"`
	AcquireP99Ms    float64 `json:"acquire_p99_ms"`
	Availability    float64 `json:"availability"`
	// ReservedPerS is the phase's throughput: reservations made per second
	// of the phase.
	ReservedPerS float64 `json:"reserved_per_s"`
}

// ExpectationResult is one expectation judged.
type ExpectationResult struct {
	Expr     string `json:"expr"`
	Held     bool   `json:"held"`
	Observed string `json:"observed"`
}

// judge splits the run into phases, counts, and checks every expectation.
func judge(spec *Spec, seed uint64, hist *History, runs []*guardRun, nodes []string) (*Result, error) {
	holds := hist.Holds()
	faults := hist.Faults()
	loadEnd := int64(spec.Workload.Duration)
	phases := phaseSpans(faults, loadEnd)
	all := append([]Phase{}, Phases...)
	for _, w := range spec.Windows {
		phases[w.Name] = Span{int64(w.From), int64(w.To)}
		all = append(all, w.Name)
	}
	t0 := hist.Start()
	res := &Result{
		Drill: spec.Name, Title: spec.Title, Seed: seed, Passed: true,
		Started: t0.UTC().Format(time.RFC3339Nano), DurationS: spec.Workload.Duration.Seconds(),
		Lab:    LabInfo{Nodes: spec.Lab.Nodes, RestartDelayMs: float64(spec.Lab.RestartDelay) / 1e6, Replicas: spec.Lab.Replicas},
		Phases: phases, Guards: map[string]*GuardResult{},
	}
	for _, p := range spec.Lab.Persistence {
		res.Lab.Persistence = append(res.Lab.Persistence, string(p))
	}
	for _, f := range spec.Faults {
		res.Faults = append(res.Faults, FaultInfo{AtS: f.At.Seconds(), Fault: string(f.Kind), Scope: string(f.Scope), Desc: f.String()})
	}
	for _, gr := range runs {
		g := string(gr.guard)
		res.GuardOrder = append(res.GuardOrder, g)
		rep := gr.report
		s := rep.Summary
		// The history holds every tenure, of replicas in the drill and in
		// serve processes alike: the double grants are its.
		checked := checkHolds(holds, g)
		dg, lv := checked.DoubleGrants(), checked.LockViolations()
		safety := rep.Safety
		safety.DoubleGrants, safety.LockViolations, safety.Examples, safety.DoubleGrantsChecked = dg, lv, checked.Examples(), gr.guard.Locks()
		rep.Safety, rep.Summary.Safety = safety, safety
		// The guard's phases are those of the faults that reach it, so
		// that the etcd guards' outage under a fault on their members is
		// not judged on the Redis nodes' one beside it, nor the other way.
		mine := faultsReaching(faults, gr.guard)
		phases := phaseSpans(mine, loadEnd)
		for _, w := range spec.Windows {
			phases[w.Name] = Span{int64(w.From), int64(w.To)}
		}
		out := &GuardResult{
			Passed: true, RunDir: string(gr.guard) + "/run", Spans: phases,
			AcquireP50Ms: s.AcquireLatencyMs.P50, AcquireP99Ms: s.AcquireLatencyMs.P99,
			ThroughputPerS: s.ThroughputPerS,
			Counts: Counts{
				DoubleGrants: dg, LockViolations: lv, LostUpdates: safety.LostUpdates, Oversell: safety.Oversell,
				FencedRejections: safety.FencedRejections, Requests: s.Requests,
				Reserved: s.Outcome(loadgen.Reserved), OutOfStock: s.Outcome(loadgen.OutOfStock), Contended: s.Outcome(loadgen.Contended),
				Unavailable: s.Outcome(loadgen.Unavailable), Overloaded: s.Outcome(loadgen.Overloaded), Fenced: s.Outcome(loadgen.Fenced),
				VersionConflict: s.Outcome(loadgen.Conflict), VersionConflicts: s.VersionConflicts,
				Error: s.Outcome(loadgen.Error), Late: s.Outcome(loadgen.Late),
			},
			Phases: map[Phase]PhaseResult{},
		}
		if gr.procs != nil {
			out.Processes = len(gr.procs.procs)
		}
		out.Availability = availability(out.Counts.Requests, out.Counts.Unavailable+out.Counts.Overloaded+out.Counts.Error+out.Counts.Late)
		for _, h := range holds {
			if h.Guard == g {
				out.Counts.Grants++
			}
		}
		// The phase reports: operations by when they were due, grants by
		// when they were made.
		reports := map[Phase]*loadgen.PhaseReport{}
		for _, ph := range all {
			sp := phases[ph]
			reports[ph] = loadgen.NewPhaseReport(len(nodes), t0.Add(time.Duration(sp.StartNs)), t0.Add(time.Duration(sp.EndNs)))
		}
		gr.mu.Lock()
		if res.Served == nil {
			res.Served = map[string]Served{}
		}
		res.Served[g] = servedBefore(gr.ops, t0, res.Phases[PhaseBefore].EndNs)
		for _, o := range gr.ops {
			if o.started.IsZero() {
				continue // never sent: counted by the run as late
			}
			at := int64(o.op.Intended.Sub(t0))
			reports[phaseOf(phases, at)].Add(o.op, o.res, o.ended)
			for _, w := range spec.Windows {
				if inWindow(w, at) {
					reports[w.Name].Add(o.op, o.res, o.ended)
				}
			}
		}
		gr.mu.Unlock()
		// Grants by phase; during counts only the grants made while every
		// fault was in force, so that a fault applied node by node (or
		// healed node by node) does not count the instants when only part
		// of it held. A grant that returns within one node timeout of the
		// last start may rest on votes cast before it (a round's votes
		// arrive within a node timeout of its start): it is not counted
		// as during either.
		grants := map[Phase]int64{}
		full := fullEffect(mine, loadEnd)
		full.StartNs += int64(nodeTimeoutOf(spec.Workload, gr.guard))
		for _, h := range holds {
			if h.Guard != g {
				continue
			}
			switch ph := phaseOf(phases, h.GrantedNs); {
			case ph != PhaseDuring:
				grants[ph]++
			case h.GrantedNs >= full.StartNs && h.GrantedNs <= full.EndNs:
				grants[PhaseDuring]++
			}
			for _, w := range spec.Windows {
				if inWindow(w, h.GrantedNs) {
					grants[w.Name]++
				}
			}
		}
		for _, ph := range all {
			pr := reports[ph]
			pr.Finish(safety)
			ps := pr.Summary
			r := PhaseResult{
				Requests: ps.Requests, Reserved: ps.Outcome(loadgen.Reserved), OutOfStock: ps.Outcome(loadgen.OutOfStock),
				Contended: ps.Outcome(loadgen.Contended), Unavailable: ps.Outcome(loadgen.Unavailable), Overloaded: ps.Outcome(loadgen.Overloaded),
				Fenced: ps.Outcome(loadgen.Fenced), VersionConflict: ps.Outcome(loadgen.Conflict),
				Error: ps.Outcome(loadgen.Error), Grants: grants[ph],
				AcquireP50Ms: ps.AcquireLatencyMs.P50, AcquireP99Ms: ps.AcquireLatencyMs.P99,
			}
			r.Availability = availability(r.Requests, r.Unavailable+r.Overloaded+r.Error)
			if d := time.Duration(phases[ph].EndNs - phases[ph].StartNs).Seconds(); d > 0 {
				r.ReservedPerS = math.Round(float64(r.Reserved)/d*100) / 100
			}
			out.Phases[ph] = r
		}
		for _, x := range spec.Expect[gr.guard] {
			er := ExpectationResult{Expr: x.Expr}
			switch {
			case x.Recovery:
				if rec, ok := recovery(holds, g, phases[PhaseDuring]); ok {
					er.Observed = time.Duration(rec).Round(time.Millisecond).String()
					er.Held = x.Cmp.Holds(float64(rec))
				} else {
					er.Observed = "no grant after the faults"
				}
			case x.Ref != nil:
				lhs, ref := reportOf(rep, reports, x.Phase), reportOf(rep, reports, x.Refs)
				l, r := loadgen.Measure(x.Metric, lhs), loadgen.Measure(*x.Ref, ref)
				er.Observed = fmt.Sprintf("%s vs %g×%s", l.Got, x.Factor, r.Got)
				if l.OK && r.OK {
					er.Held = loadgen.Compare(l.Value, x.Cmp.Op, x.Factor*r.Value)
				}
			case x.Grants:
				n := grants[x.Phase]
				er.Observed = strconv.FormatInt(n, 10)
				er.Held = x.Cmp.Holds(float64(n))
			case x.Phase == PhaseAll:
				tr := loadgen.Evaluate(x.Threshold, rep)
				er.Held, er.Observed = tr.Pass, tr.Got
			default:
				tr := loadgen.Evaluate(x.Threshold, &reports[x.Phase].Report)
				er.Held, er.Observed = tr.Pass, tr.Got
			}
			out.Expectations = append(out.Expectations, er)
			if !er.Held {
				out.Passed, res.Passed = false, false
			}
		}
		res.Guards[g] = out
	}
	res.Invalid = invalidReason(res.Served, time.Duration(res.Phases[PhaseBefore].EndNs))
	return res, nil
}

// Verdict is the drill's verdict: INVALID, PASS or FAIL.
func (r *Result) Verdict() string {
	switch {
	case r.Invalid != "":
		return "INVALID"
	case r.Passed:
		return "PASS"
	}
	return "FAIL"
}

// reportOf is the report a phase's figures come from.
func reportOf(all *loadgen.Report, phases map[Phase]*loadgen.PhaseReport, ph Phase) *loadgen.Report {
	if ph == PhaseAll {
		return all
	}
	return &phases[ph].Report
}

// recovery is the time from the end of the faults to the first lock the
// guard granted after it.
func recovery(holds []HoldRecord, guard string, during Span) (int64, bool) {
	for _, h := range holds { // in grant order
		if h.Guard == guard && h.GrantedNs >= during.EndNs {
			return h.GrantedNs - during.EndNs, true
		}
	}
	return 0, false
}

func availability(requests, failed int64) float64 {
	if requests == 0 {
		return 0
	}
	return math.Round(float64(requests-failed)/float64(requests)*1e5) / 1e5
}

// phaseSpans splits [0, end) at the first fault's start and the last
// fault's end (a fault still active at the end of the load lasts until
// then). Without faults, everything is before.
func phaseSpans(faults []FaultRecord, end int64) map[Phase]Span {
	first, last := int64(-1), int64(-1)
	open := map[string]int64{}
	for _, f := range faults {
		switch f.Event {
		case "start":
			if first < 0 || f.AtNs < first {
				first = f.AtNs
			}
			open[f.ID] = f.AtNs
			last = max(last, f.AtNs)
		case "end":
			delete(open, f.ID)
			last = max(last, f.AtNs)
		}
	}
	if first < 0 {
		return map[Phase]Span{PhaseBefore: {0, end}, PhaseDuring: {end, end}, PhaseAfter: {end, end}}
	}
	if len(open) > 0 {
		last = max(last, end)
	}
	first = min(max(first, 0), end)
	last = min(max(last, first), end)
	return map[Phase]Span{PhaseBefore: {0, first}, PhaseDuring: {first, last}, PhaseAfter: {last, end}}
}

// faultsReaching are the fault records that reach guard g (what
// spec.ReachedBy says reaches it): a fault on the Redis nodes or on the
// etcd members it locks on, a client-pause of its own holders. A guard that
// none of them reaches, a control, is judged on all of them.
func faultsReaching(faults []FaultRecord, g inventory.Guard) []FaultRecord {
	by := spec.ReachedBy(g)
	var out []FaultRecord
	for _, f := range faults {
		var r spec.Reacher
		switch {
		case f.Fault == string(fault.ClientPause):
			if f.Guard != string(g) {
				continue
			}
			r = spec.PausedHolder
		case f.EtcdMember > 0:
			r = spec.EtcdMembers
		default:
			r = spec.RedisNodes
		}
		if by&r != 0 {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return faults
	}
	return out
}

// fullEffect is the span when every fault of the drill was in force: from
// the last start to the first end (a fault never ended lasts until the end
// of the load). It is empty (EndNs < StartNs) when the faults never all held
// at once.
func fullEffect(faults []FaultRecord, end int64) Span {
	starts, ends := map[string]int64{}, map[string]int64{}
	for _, f := range faults {
		switch f.Event {
		case "start":
			starts[f.ID] = f.AtNs
		case "end":
			ends[f.ID] = f.AtNs
		}
	}
	if len(starts) == 0 {
		return Span{StartNs: end, EndNs: end - 1}
	}
	sp := Span{StartNs: -1, EndNs: end}
	for id, st := range starts {
		sp.StartNs = max(sp.StartNs, st)
		if e, ok := ends[id]; ok {
			sp.EndNs = min(sp.EndNs, e)
		}
	}
	return sp
}

// inWindow reports whether ns (from the start of the load) falls in w.
func inWindow(w Window, ns int64) bool { return ns >= int64(w.From) && ns < int64(w.To) }

// phaseOf places an instant: during covers its end instant too (a fault
// healed at t ends the faulty phase at t).
func phaseOf(sp map[Phase]Span, ns int64) Phase {
	switch {
	case ns < sp[PhaseDuring].StartNs:
		return PhaseBefore
	case ns <= sp[PhaseDuring].EndNs:
		return PhaseDuring
	}
	return PhaseAfter
}

// ReadResult reads a drill's result.json.
func ReadResult(dir string) (*Result, error) {
	b, err := os.ReadFile(filepath.Join(dir, ResultFile))
	if err != nil {
		return nil, fmt.Errorf("drill: %w", err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("drill: %s: %w", filepath.Join(dir, ResultFile), err)
	}
	return &r, nil
}

// Failures lists the expectations that did not hold, as "guard: expr
// (observed X)", in the workload's guard order.
func (r *Result) Failures() []string {
	var out []string
	order := r.GuardOrder
	if len(order) == 0 {
		for g := range r.Guards {
			order = append(order, g)
		}
		sort.Strings(order)
	}
	for _, g := range order {
		gr := r.Guards[g]
		if gr == nil {
			continue
		}
		for _, e := range gr.Expectations {
			if !e.Held {
				out = append(out, fmt.Sprintf("%s: %s (observed %s)", g, e.Expr, e.Observed))
			}
		}
	}
	for _, d := range r.Disagreements {
		out = append(out, "the checkers disagree: "+d)
	}
	return out
}

func writeJSON(path string, v any) error {
	if err := atomicfile.WriteJSON(path, v, 0o644); err != nil {
		return fmt.Errorf("drill: %w", err)
	}
	return nil
}

// nodeTimeoutOf is the node timeout guard g's lock clients ran with: the
// spec's, or the redlock default.
func nodeTimeoutOf(w Workload, g inventory.Guard) time.Duration {
	if d := w.NodeTimeoutOf(g); d > 0 {
		return d
	}
	return redlock.DefaultNodeTimeout
}

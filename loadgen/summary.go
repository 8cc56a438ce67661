package loadgen

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Summary is summary.json: the figures of a whole run.
type Summary struct {
	Requests         int64            `json:"requests"` // operations whose turn came, late ones included
	DurationS        float64          `json:"duration_s"`
	ThroughputPerS   float64          `json:"throughput_per_s"` // operations sent and ended per second
	Outcomes         map[string]int64 `json:"outcomes"`
	AcquireLatencyMs Percentiles      `json:"acquire_latency_ms"`
	E2ELatencyMs     Percentiles      `json:"e2e_latency_ms"` // from the intended start
	Attempts         AttemptStats     `json:"attempts"`
	PerNode          []NodeSummary    `json:"per_node"`
	Safety           Safety           `json:"safety"`

	// Beyond the required fields: the rest of the picture.
	E2EUncorrectedLatencyMs Percentiles `json:"e2e_uncorrected_latency_ms"` // from the actual start
	HoldLatencyMs           Percentiles `json:"hold_latency_ms"`
	ReleaseLatencyMs        Percentiles `json:"release_latency_ms"`
	LateStarts              int64       `json:"late_starts"` // sent, but later than the tolerance
	// VersionConflicts are db-version's tries lost to a concurrent write,
	// retried or (outcome version_conflict) run out.
	VersionConflicts int64   `json:"version_conflicts,omitempty"`
	TargetRatePerS   float64 `json:"target_rate_per_s"`
	// GeneratorCPU is the generator process's CPU time during the run,
	// in all and per operation sent and ended (see Info.CPU).
	GeneratorCPUS       float64 `json:"generator_cpu_s,omitempty"`
	GeneratorCPUMsPerOp float64 `json:"generator_cpu_ms_per_op,omitempty"`
	// ProcessesCPUS is the CPU time of the watched processes (the lock
	// nodes, their fronts; see Config.Watch), and CPUMsPerReserved the
	// CPU of every process, generator included, per reservation made
	// (omitted when a watched process could not be read).
	ProcessesCPUS    float64           `json:"processes_cpu_s,omitempty"`
	CPUMsPerReserved float64           `json:"cpu_ms_per_reserved,omitempty"`
	Clamped          int64             `json:"clamped,omitempty"`
	Guard            string            `json:"guard,omitempty"`
	Target           string            `json:"target"`
	Keys             string            `json:"keys"`
	Stages           string            `json:"stages"`
	Started          time.Time         `json:"started"`
	Stopped          bool              `json:"stopped,omitempty"`
	Thresholds       []ThresholdResult `json:"thresholds,omitempty"`
}

// Outcome is the number of operations that ended with o.
func (s Summary) Outcome(o Outcome) int64 { return s.Outcomes[o.String()] }

// ReservedPerS is goodput: reservations made per second of the run.
func (s Summary) ReservedPerS() float64 {
	if s.DurationS <= 0 {
		return 0
	}
	return math.Round(float64(s.Outcome(Reserved))/s.DurationS*100) / 100
}

// ReservedShare is the share of the run's operations that reserved (0 when
// there were none).
func (s Summary) ReservedShare() float64 {
	if s.Requests <= 0 {
		return 0
	}
	return float64(s.Outcome(Reserved)) / float64(s.Requests)
}

// Percentiles of a latency histogram, in milliseconds.
type Percentiles struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
}

// AttemptStats summarises lock acquire attempts per reservation.
type AttemptStats struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P99   int64   `json:"p99"`
	Max   int64   `json:"max"`
}

// NodeSummary is one lock node's SET latency and outcomes.
type NodeSummary struct {
	Node      int              `json:"node"` // number from 1, in --nodes order; its histogram is tagged "node<Node>"
	Addr      string           `json:"addr,omitempty"`
	LatencyMs Percentiles      `json:"latency_ms"`
	Outcomes  map[string]int64 `json:"outcomes"`
}

func ms(ns int64) float64 { return math.Round(float64(ns)/1e3) / 1e3 }

func percentilesOf(h *hdr.Histogram) Percentiles {
	if h == nil || h.TotalCount() == 0 {
		return Percentiles{}
	}
	v := atPercentiles(h, 50, 90, 99, 99.9)
	mean, _ := histStats(h)
	return Percentiles{
		Count: h.TotalCount(),
		P50:   ms(v[0]), P90: ms(v[1]), P99: ms(v[2]), P999: ms(v[3]),
		Max: ms(h.Max()), Mean: ms(int64(mean)),
	}
}

func buildSummary(r *Report) Summary {
	t := r.Totals
	s := Summary{
		Outcomes:                make(map[string]int64, numOutcomes),
		AcquireLatencyMs:        percentilesOf(t.Acquire),
		E2ELatencyMs:            percentilesOf(t.E2E),
		E2EUncorrectedLatencyMs: percentilesOf(t.E2EUncorrected),
		HoldLatencyMs:           percentilesOf(t.Hold),
		ReleaseLatencyMs:        percentilesOf(t.Release),
		Safety:                  r.Safety,
		LateStarts:              t.LateStarts,
		VersionConflicts:        t.VersionConflicts,
		Clamped:                 t.Clamped,
		Guard:                   r.Meta.Guard,
		Target:                  r.Meta.Target,
		Keys:                    r.Meta.Keys,
		Stages:                  r.Meta.Stages,
		Started:                 r.Meta.Started,
		Stopped:                 r.Meta.Stopped,
		PerNode:                 []NodeSummary{},
	}
	for i, c := range t.Outcomes {
		s.Outcomes[outcomeNames[i]] = c
		s.Requests += c
	}
	s.DurationS = r.duration().Seconds()
	s.GeneratorCPUS = r.Meta.CPUSeconds
	if ended := s.Requests - t.Outcomes[Late]; ended > 0 && s.GeneratorCPUS > 0 {
		s.GeneratorCPUMsPerOp = math.Round(s.GeneratorCPUS/float64(ended)*1e6) / 1e3
	}
	lost := false
	for _, p := range r.Meta.Processes {
		s.ProcessesCPUS += p.Seconds
		lost = lost || p.Lost
	}
	s.ProcessesCPUS = math.Round(s.ProcessesCPUS*1000) / 1000
	// A process that could not be read leaves its share out: no per
	// reservation figure rather than one too low.
	if n := t.Outcomes[Reserved]; n > 0 && s.GeneratorCPUS > 0 && !lost {
		s.CPUMsPerReserved = math.Round((s.GeneratorCPUS+s.ProcessesCPUS)/float64(n)*1e6) / 1e3
	}
	if s.DurationS > 0 {
		s.ThroughputPerS = math.Round(float64(s.Requests-t.Outcomes[Late])/s.DurationS*100) / 100
		if sched := r.plannedRate(); sched > 0 {
			s.TargetRatePerS = math.Round(sched*100) / 100
		}
	}
	if n := t.Attempts.TotalCount(); n > 0 {
		mean, _ := histStats(t.Attempts)
		s.Attempts = AttemptStats{Count: n, Mean: math.Round(mean*1000) / 1000,
			P99: atPercentile(t.Attempts, 99), Max: t.Attempts.Max()}
	}
	// Per-node figures belong to a guard that locks on the Redis nodes; a
	// drill lists the nodes for every guard, an etcd guard's too.
	redis, _, known := r.Meta.lockService()
	redis = redis || !known
	for i, h := range t.Nodes {
		if !redis {
			break
		}
		ns := NodeSummary{Node: nodeNumber(i), LatencyMs: percentilesOf(h), Outcomes: make(map[string]int64, numNodeOutcomes)}
		if i < len(r.Meta.Nodes) {
			ns.Addr = r.Meta.Nodes[i]
		}
		for j, c := range t.NodeOutcomes[i] {
			ns.Outcomes[nodeOutcomeNames[j]] = c
		}
		s.PerNode = append(s.PerNode, ns)
	}
	s.Thresholds = r.Thresholds
	return s
}

// WriteText prints the human summary with the percentile table.
func (r *Report) WriteText(w io.Writer) error {
	s := r.Summary
	var b strings.Builder
	m := r.Meta
	fmt.Fprintf(&b, "redlab load: target %s", m.Target)
	if m.Guard != "" {
		fmt.Fprintf(&b, ", guard %s", m.Guard)
	}
	if m.Replicas > 0 {
		fmt.Fprintf(&b, ", %d replicas", m.Replicas)
	}
	fmt.Fprintf(&b, ", keys %s, profile %s", m.Keys, m.Stages)
	if m.Worker != "" && m.Worker != "0/1" {
		fmt.Fprintf(&b, ", worker %s", m.Worker)
	}
	if len(m.Sources) > 0 {
		fmt.Fprintf(&b, ", merged from %d runs", len(m.Sources))
	}
	if d := m.Drill; d != nil {
		fmt.Fprintf(&b, "; drill %s: %s", d.Name, d.Verdict)
		if d.Guard != "" {
			fmt.Fprintf(&b, " (this guard: %s)", d.Guard)
		}
	}
	b.WriteString("\n")
	stopped := ""
	if s.Stopped {
		stopped = " (stopped early)"
	}
	fmt.Fprintf(&b, "requests %d in %.1fs%s: %.1f/s sent and ended (target %.1f/s); late: %d never sent, %d sent late\n",
		s.Requests, s.DurationS, stopped, s.ThroughputPerS, s.TargetRatePerS, s.Outcomes[Late.String()], s.LateStarts)
	b.WriteString("outcomes:")
	for _, name := range outcomeNames {
		fmt.Fprintf(&b, " %s %d", name, s.Outcomes[name])
	}
	b.WriteString("\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency (ms)\tcount\tp50\tp90\tp99\tp99.9\tmax\t")
	row := func(name string, p Percentiles) {
		if p.Count == 0 {
			fmt.Fprintf(tw, "%s\t0\t-\t-\t-\t-\t-\t\n", name)
			return
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", name, p.Count, p.P50, p.P90, p.P99, p.P999, p.Max)
	}
	for _, lr := range latencyRows(s) {
		row(lr.Name, lr.P)
	}
	for _, n := range s.PerNode {
		name := fmt.Sprintf("node%d SET", n.Node)
		if n.Addr != "" {
			name += " " + n.Addr
		}
		row(name, n.LatencyMs)
	}
	tw.Flush()
	if s.Attempts.Count > 0 {
		fmt.Fprintf(&b, "attempts per acquire: mean %.3f, p99 %d, max %d\n", s.Attempts.Mean, s.Attempts.P99, s.Attempts.Max)
	}
	if s.VersionConflicts > 0 {
		fmt.Fprintf(&b, "version conflicts: %d tries lost to a concurrent write (retried, or out of tries: %d)\n", s.VersionConflicts, s.Outcomes[Conflict.String()])
	}
	if s.GeneratorCPUS > 0 {
		fmt.Fprintf(&b, "generator CPU: %.2fs, %.3f ms per operation (this process: generator, and the in-process replicas with their store and lock clients)\n", s.GeneratorCPUS, s.GeneratorCPUMsPerOp)
	}
	if len(r.Meta.Processes) > 0 {
		fmt.Fprintf(&b, "CPU of %d watched processes: %.2fs; every process: %.3f ms per reservation\n", len(r.Meta.Processes), s.ProcessesCPUS, s.CPUMsPerReserved)
	}
	for _, n := range s.PerNode {
		fmt.Fprintf(&b, "node%d outcomes:", n.Node)
		for _, name := range nodeOutcomeNames {
			fmt.Fprintf(&b, " %s %d", name, n.Outcomes[name])
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	sf := s.Safety
	if sf.DoubleGrantsChecked || sf.AuditChecked {
		dg, lv, lu := "not checked", "not checked", "not checked"
		if sf.DoubleGrantsChecked {
			dg, lv = fmt.Sprint(sf.DoubleGrants), fmt.Sprint(sf.LockViolations)
		}
		if sf.AuditChecked {
			lu = fmt.Sprint(sf.LostUpdates)
		}
		fmt.Fprintf(&b, "safety: double grants %s (lock violations %s), lost updates %s, oversell %d, fenced rejections %d\n", dg, lv, lu, sf.Oversell, sf.FencedRejections)
	} else {
		b.WriteString("safety: not checked (this target reports no holds and has no store to audit)\n")
	}
	if n := s.Outcomes[Unknown.String()]; n > 0 {
		if sf.AuditChecked {
			fmt.Fprintf(&b, "unknown outcomes: %d sent and never answered; the ledger has %d of them committed, %d not\n", n, sf.UnknownCommitted, sf.UnknownNotCommitted)
		} else {
			fmt.Fprintf(&b, "unknown outcomes: %d sent and never answered, not audited (no store to look them up in)\n", n)
		}
	}
	for _, t := range s.Thresholds {
		mark := "pass"
		if !t.Pass {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "threshold %s: %s (got %s)\n", t.Expr, mark, t.Got)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

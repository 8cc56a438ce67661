package plan

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/loadgen"
	"github.com/redlocklab/redlocklab/redlock"
)

// Version is plan.json's format version.
const Version = 1

// Plan is plan.json: the target, what was measured, the recommendation, and
// the verification when it ran.
type Plan struct {
	Version int       `json:"version"`
	Created time.Time `json:"created"`
	Command string    `json:"command,omitempty"`
	// Site is lab, nodes or hosts; Nodes the lock nodes.
	Site  string   `json:"site"`
	Nodes []string `json:"nodes"`

	Target   TargetRecord   `json:"target"`
	Fixed    FixedRecord    `json:"fixed"`
	Measured Measurements   `json:"measured"`
	Facts    Facts          `json:"facts"`
	Rec      Recommendation `json:"recommendation"`
	// Options is the library's options for the recommendation, as Go.
	Options string `json:"options_go"`
	// TFVars are the terraform.tfvars entries for infra/envs/aws;
	// TFVarsCheck what CheckTFVars said of them.
	TFVars      []TFVar `json:"tfvars"`
	TFVarsCheck string  `json:"tfvars_check"`
	// Verify is the verification, when it ran.
	Verify *Verification `json:"verify,omitempty"`
	TookS  float64       `json:"took_s"`
}

// TargetRecord is the target as plan.json keeps it.
type TargetRecord struct {
	Rate float64  `json:"rate"`
	SLO  []string `json:"slo"`
	Hold Hold     `json:"hold"`
}

// FixedRecord is what the user fixed (0: nothing).
type FixedRecord struct {
	Nodes int     `json:"nodes,omitempty"`
	TTLS  float64 `json:"ttl_s,omitempty"`
}

// newPlan reduces the measurements to the rules' facts and applies them.
func newPlan(cfg Config, m Measurements, created time.Time) *Plan {
	p := &Plan{Version: Version, Created: created.UTC(), Command: cfg.Command, Site: cfg.Site.Kind, Nodes: cfg.Site.Nodes,
		Target: TargetRecord{Rate: cfg.Target.Rate, Hold: cfg.Target.Hold}, Fixed: FixedRecord{Nodes: cfg.Fixed.Nodes, TTLS: cfg.Fixed.TTL.Seconds()},
		Measured: m}
	for _, t := range cfg.Target.SLO {
		p.Target.SLO = append(p.Target.SLO, t.Expr)
	}
	p.Facts = factsOf(cfg, m)
	p.Rec = Recommend(p.Facts)
	for _, f := range m.Doctor.Findings {
		sev := Warn
		if f.Severity == redlock.Critical {
			sev = Critical
		}
		where := "the node set"
		if f.Node >= 0 && f.Node < len(p.Nodes) {
			where = fmt.Sprintf("node%d %s", f.Node+1, p.Nodes[f.Node])
		}
		p.Rec.Warnings = append(p.Rec.Warnings, Warning{Severity: sev, From: "doctor", Message: fmt.Sprintf("%s: %s: %s", where, f.Check, f.Message), Fix: f.Fix})
	}
	p.Options = goOptions(p.Rec)
	p.TFVars = tfvars(p.Rec, p.Facts)
	return p
}

// factsOf reduces the measurements to what the rules read.
func factsOf(cfg Config, m Measurements) Facts {
	f := Facts{Rate: cfg.Target.Rate, SLOAcquireP99: sloAcquire(cfg.Target.SLO),
		HoldTail: cfg.Target.Hold.Max, HoldP50: cfg.Target.Hold.P50, HoldFrom: cfg.Target.Hold.From,
		FixedNodes: cfg.Fixed.Nodes, FixedTTL: cfg.Fixed.TTL, Nodes: len(m.Nodes), SharedClock: m.SharedClock}
	fsyncs := map[string]bool{}
	for _, n := range m.Nodes {
		if d := durMs(n.RTT.P99); d > f.RTTP99 {
			f.RTTP99, f.RTTNode = d, fmt.Sprintf("node%d %s", n.Node, n.Addr)
		}
		if o := durMs(n.ClockOffsetMs); o.Abs() > f.MaxOffset.Abs() {
			f.MaxOffset, f.MaxOffsetNode = o, fmt.Sprintf("node%d", n.Node)
		}
		if n.Appendfsync != "" {
			fsyncs[n.Appendfsync] = true
		}
	}
	switch {
	case len(fsyncs) == 1:
		for k := range fsyncs {
			f.Appendfsync = k
		}
	case len(fsyncs) > 1:
		f.Appendfsync = "mixed"
	}
	// The slowest disk speaks for all: every node needs its fsyncs.
	for _, d := range m.Disks {
		if d.Error != "" || d.SyncsPerS <= 0 {
			continue
		}
		perNode := d.SyncsPerS / float64(max(len(d.Nodes), 1))
		if !f.DiskMeasured || perNode < f.DiskSyncsPerS/float64(max(f.NodesPerDisk, 1)) {
			f.DiskSyncsPerS, f.NodesPerDisk, f.DiskWhere = d.SyncsPerS, max(len(d.Nodes), 1), fmt.Sprintf("%s (%s)", d.Host, d.Dir)
		}
		f.DiskMeasured = true
		f.DiskP99 = max(f.DiskP99, durMs(d.Latency.P99))
	}
	// The clocks: chrony's worst on any host.
	var why []string
	checked := 0
	for _, c := range m.Clocks {
		if c.Error != "" {
			why = append(why, c.Host+": "+c.Error)
			continue
		}
		checked++
		if checked == 1 || c.MaxSlewPPM == 0 || (f.MaxSlewPPM != 0 && c.MaxSlewPPM > f.MaxSlewPPM) {
			f.MaxSlewPPM = c.MaxSlewPPM
		}
		f.FreqPPM = max(f.FreqPPM, abs(c.FreqPPM)+c.SkewPPM)
		f.StepsAfterBoot = f.StepsAfterBoot || c.StepsAfterBoot()
	}
	f.ClockChecked = checked > 0 && checked == len(m.Clocks)
	if len(m.Clocks) == 0 {
		why = append(why, "no host reachable over SSH")
	}
	f.ClockWhy = strings.Join(why, "; ")
	if !f.ClockChecked {
		f.MaxSlewPPM, f.FreqPPM, f.StepsAfterBoot = 0, 0, false
	}

	sw := m.Sweep
	f.Knee, f.KneeBounded = sw.Knee, sw.Bounded
	// The step at the target rate, or the first above it, gives the
	// latencies the rules read: measured under the target's load, met or
	// not; the highest step when the sweep stopped below the target.
	var at *Step
	for i := range sw.Steps {
		s := &sw.Steps[i]
		if at == nil || (at.Rate < f.Rate && s.Rate > at.Rate) || (s.Rate >= f.Rate && s.Rate < at.Rate) {
			at = s
		}
	}
	if at != nil {
		f.AcquireP99, f.NodeP99, f.AtRate = durMs(at.AcquireP99Ms), durMs(at.NodeP99Ms), at.Rate
	}
	if len(sw.Steps) > 0 {
		f.Lowest = stepFacts(sw.Steps[0])
	}
	for _, s := range sw.Steps {
		if !s.Pass && s.Rate > sw.Knee {
			f.Miss = stepFacts(s)
			break
		}
	}
	return f
}

func stepFacts(s Step) *StepFacts {
	host, b := s.busiest()
	return &StepFacts{Rate: s.Rate, AcquireP99: durMs(s.AcquireP99Ms), CPUBusy: b, CPUWhere: host, LateShare: s.LateShare, Why: s.Why}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// sloAcquire is the SLO's bound on the acquire latency's tail (acquire.p99,
// p999 or max with < or <=), 0 when it sets none.
func sloAcquire(slo []loadgen.Threshold) time.Duration {
	var d time.Duration
	for _, t := range slo {
		m := t.ParsedMetric()
		if m.Head() != loadgen.TagAcquire || !m.IsLatency() || (t.Op != "<" && t.Op != "<=") {
			continue
		}
		if v := time.Duration(t.Value); d == 0 || v < d {
			d = v
		}
	}
	return d
}

// Read reads a plan.json.
func Read(dir string) (*Plan, error) {
	b, err := os.ReadFile(filepath.Join(dir, JSONFile))
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("plan: %s: %w", filepath.Join(dir, JSONFile), err)
	}
	return &p, nil
}

package plan

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/redlocklab/redlocklab/internal/prose"

	"github.com/redlocklab/redlocklab/internal/atomicfile"
)

// Write writes plan.json, plan.md, terraform.tfvars and plan.html into dir.
func (p *Plan) Write(dir string) error {
	if err := atomicfile.WriteJSON(filepath.Join(dir, JSONFile), p, 0o644); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	for name, text := range map[string]string{
		MarkdownFile: p.Markdown(),
		TFVarsFile:   tfvarsText(p.TFVars, p),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return fmt.Errorf("plan: %w", err)
		}
	}
	return p.writeHTML(filepath.Join(dir, HTMLFile))
}

// Verdict is the plan's verdict in one line: it meets the target, or it
// does not, with the limiting resource.
func (p *Plan) Verdict() string {
	if p.Rec.Meets {
		return fmt.Sprintf("meets %s/s under %s: knee %s/s (%.2f× the target)", rate(p.Target.Rate), strings.Join(p.Target.SLO, " && "), rate(p.Measured.Sweep.Knee), p.Rec.KneeHeadroom)
	}
	return fmt.Sprintf("does not meet %s/s under %s: limited by %s: %s", rate(p.Target.Rate), strings.Join(p.Target.SLO, " && "), p.Rec.Limit.Resource, p.Rec.Limit.Why)
}

// Markdown is plan.md.
func (p *Plan) Markdown() string {
	var b strings.Builder
	cite := citationsOf(p.Rec.Values)
	fmt.Fprintf(&b, "# Redlock plan: %s reservations/s, %s\n\n", rate(p.Target.Rate), strings.Join(p.Target.SLO, " && "))
	fmt.Fprintf(&b, "Made by `%s` on %s, measured on %s (%d nodes: %s). The critical section holds the lock up to %s (median %s; %s).\n\n",
		orUnknown(p.Command), p.Created.Format("2006-01-02 15:04 MST"), siteWords(p.Site), len(p.Nodes), strings.Join(p.Nodes, ", "),
		dur(p.Target.Hold.Max), dur(p.Target.Hold.P50), p.Target.Hold.From)
	if p.Rec.Meets {
		fmt.Fprintf(&b, "**Meets the target.** %s.\n\n", p.Verdict())
	} else {
		fmt.Fprintf(&b, "**Does not meet the target.** Limiting resource: **%s**. %s.\n\n", p.Rec.Limit.Resource, p.Rec.Limit.Why)
	}

	b.WriteString("## Recommendation\n\n")
	b.WriteString("| value | recommended | rule | sources | measured |\n|---|---|---|---|---|\n")
	for _, v := range p.Rec.Values {
		val := v.Value
		if v.Fixed {
			val += " (fixed)"
		}
		fmt.Fprintf(&b, "| %s | **%s** | %s | %s | %s |\n", v.Label, cell(val), cell(v.Rule), cite.refs(v.Sources), cell(v.Measured))
	}
	b.WriteString("\n### Node count\n\n| nodes | quorum | tolerates | faults | |\n|---:|---:|---:|---|---|\n")
	for _, c := range p.Rec.NodeCounts {
		mark := ""
		if c.Chosen {
			mark = "**planned**"
		}
		fmt.Fprintf(&b, "| %d | %d | %d | %s | %s |\n", c.Nodes, c.Quorum, c.Tolerates, c.Faults, mark)
	}

	b.WriteString("\n## Warnings\n\n")
	if len(p.Rec.Warnings) == 0 {
		b.WriteString("None.\n")
	}
	for _, w := range p.Rec.Warnings {
		fmt.Fprintf(&b, "- **%s** (%s): %s.", w.Severity, w.From, strings.TrimSuffix(w.Message, "."))
		if w.Fix != "" {
			fmt.Fprintf(&b, " %s", w.Fix)
		}
		b.WriteString("\n")
	}

	if v := p.Verify; v != nil {
		b.WriteString("\n## Verification\n\n")
		if v.Passed {
			b.WriteString("Every drill of the recommendation passed and every control failed, as each must. ")
		} else {
			b.WriteString("**The verification did not hold**: see the rows below. ")
		}
		b.WriteString("Double grants and lock violations are counted again from each drill's `history.jsonl`.\n\n")
		b.WriteString("| drill | runs | must | verdict | double grants | lock violations | expectations |\n|---|---|---|---|---:|---:|---|\n")
		for _, d := range v.Drills {
			runs := "the plan (" + strings.Join(d.Tests, ", ") + ")"
			if d.Control {
				runs = "wrong: " + d.Wrong
			}
			must := "pass"
			if d.Control {
				must = "fail"
			}
			var xs []string
			for _, x := range d.Expectations {
				mark := "✓"
				if !x.Held {
					mark = "✗"
				}
				xs = append(xs, fmt.Sprintf("%s `%s` (%s)", mark, x.Expr, x.Observed))
			}
			fmt.Fprintf(&b, "| [%s](%s) | %s | %s | %s | %d | %d | %s |\n", d.Name, d.Runbook, cell(runs), must, cell(d.verdict()), d.DoubleGrants, d.LockViolations, strings.Join(xs, "<br>"))
		}
	}

	b.WriteString("\n## Deploy\n\n`terraform.tfvars` for `infra/envs/aws` (only variables it declares):\n\n```hcl\n")
	for _, v := range p.TFVars {
		fmt.Fprintf(&b, "%s = %s # %s\n", v.Name, v.Value, v.Why)
	}
	fmt.Fprintf(&b, "```\n\nChecked: %s.\n\nThe library's options (`redlock.With…`):\n\n```go\n", p.TFVarsCheck)
	b.WriteString(p.Options)
	b.WriteString("```\n\n")

	b.WriteString("## Measurements\n\n")
	m := p.Measured
	b.WriteString("| node | host | round trip p50 ms | p99 ms | max ms | clock offset ms | appendfsync |\n|---|---|---:|---:|---:|---:|---|\n")
	for _, n := range m.Nodes {
		fmt.Fprintf(&b, "| node%d %s | %s | %.3f | %.3f | %.3f | %.3f | %s |\n", n.Node, n.Addr, n.Host, n.RTT.P50, n.RTT.P99, n.RTT.Max, n.ClockOffsetMs, orUnknown(n.Appendfsync))
	}
	b.WriteString("\n| data disk | directory | nodes | fsyncs/s (writers) | one append p50 ms | p99 ms | max ms |\n|---|---|---|---:|---:|---:|---:|\n")
	for _, d := range m.Disks {
		if d.Error != "" {
			fmt.Fprintf(&b, "| %s | %s | %s | not measured: %s | | | |\n", d.Host, d.Dir, prose.List(d.Nodes), cell(d.Error))
			continue
		}
		fmt.Fprintf(&b, "| %s | %s (%s) | %s | %.0f (%d) | %.3f | %.3f | %.3f |\n", d.Host, d.Dir, d.FS, prose.List(d.Nodes), d.SyncsPerS, d.Writers, d.Latency.P50, d.Latency.P99, d.Latency.Max)
	}
	if len(m.Disks) == 0 {
		b.WriteString("| none reachable | | | | | | |\n")
	}
	b.WriteString("\n| clock of | NTP | offset ms | frequency ppm | skew ppm | maxslewrate ppm | makestep |\n|---|---|---:|---:|---:|---:|---|\n")
	for _, c := range m.Clocks {
		if c.Error != "" {
			fmt.Fprintf(&b, "| %s | not read: %s | | | | | |\n", c.Host, cell(c.Error))
			continue
		}
		fmt.Fprintf(&b, "| %s | %s, stratum %d, %s | %.3f | %.3f | %.3f | %s | %s |\n", c.Host, c.Leap, c.Stratum, c.Reference, c.OffsetMs, c.FreqPPM, c.SkewPPM, slewText(c.MaxSlewPPM), orUnknown(c.MakeStep))
	}
	if m.SharedClock {
		b.WriteString("\nThe nodes share this machine's clock: offsets between them are zero by construction.\n")
	}
	fmt.Fprintf(&b, "\nSweep (`%s`): redlock guard, %s keys, %.0f s steps, SLO %s; the knee %s.\n\n", m.Sweep.Dir, m.Sweep.Keys, m.Sweep.StepS, strings.Join(m.Sweep.SLO, " && "), kneeWords(m.Sweep))
	b.WriteString("| rate/s | verdict | reserved/s | acquire p50 ms | acquire p99 ms | slowest node SET p99 ms | busiest CPU |\n|---:|---|---:|---:|---:|---:|---|\n")
	for _, s := range m.Sweep.Steps {
		verdict := "met"
		if !s.Pass {
			verdict = "missed: " + s.Why
		}
		host, busy := s.busiest()
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.3f | %.3f | %.3f (node%d) | %.0f %% (%s) |\n", rate(s.Rate), cell(verdict), s.Reserved, s.AcquireP50Ms, s.AcquireP99Ms, s.NodeP99Ms, s.NodeP99Node, busy*100, host)
	}
	if len(m.Doctor.Findings) > 0 || m.Doctor.Summary.Nodes > 0 {
		fmt.Fprintf(&b, "\nDoctor: %s.\n", m.Doctor.Summary)
	}

	b.WriteString("\n## Sources\n\n")
	for i, s := range cite.order {
		src, _ := source(s)
		fmt.Fprintf(&b, "%d. %s", i+1, src.Title)
		if src.URL != "" {
			fmt.Fprintf(&b, " (<%s>)", src.URL)
		}
		fmt.Fprintf(&b, ": %s.\n", src.Rule)
	}
	fmt.Fprintf(&b, "\n_Charts: [plan.html](%s). The plan took %.0f s._\n", HTMLFile, p.TookS)
	return b.String()
}

// citeList numbers the sources in the order the values first cite them.
type citeList struct{ order []string }

func citationsOf(vals []Value) citeList {
	var c citeList
	for _, v := range vals {
		for _, s := range v.Sources {
			if !slices.Contains(c.order, s) {
				c.order = append(c.order, s)
			}
		}
	}
	return c
}

func (c citeList) refs(ids []string) string {
	var out []string
	for _, id := range ids {
		out = append(out, fmt.Sprintf("[%d]", slices.Index(c.order, id)+1))
	}
	return strings.Join(out, " ")
}

func siteWords(kind string) string {
	switch kind {
	case "lab":
		return "a local lab"
	case "hosts":
		return "hosts over SSH"
	}
	return "nodes given by address"
}

func kneeWords(s SweepResult) string {
	switch {
	case s.Knee == 0:
		return "was not reached: no step met the SLO"
	case s.Bounded:
		return fmt.Sprintf("is %s/s (a higher rate missed)", rate(s.Knee))
	}
	return fmt.Sprintf("is at least %s/s (every step met the SLO)", rate(s.Knee))
}

func slewText(v float64) string {
	if v == 0 {
		return "default (83333)"
	}
	return trimFloat(v)
}

// cell makes s safe in a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ").Replace(s)
}

// Summary is the plan in a few lines for a terminal: the verdict, then
// every value.
func (p *Plan) Summary() string {
	var b strings.Builder
	b.WriteString(p.Verdict())
	b.WriteString("\n")
	for _, v := range p.Rec.Values {
		fmt.Fprintf(&b, "  %-16s %s\n", v.Label, v.Value)
	}
	for _, w := range p.Rec.Warnings {
		fmt.Fprintf(&b, "  %s (%s): %s\n", w.Severity, w.From, w.Message)
	}
	if v := p.Verify; v != nil {
		for _, d := range v.Drills {
			fmt.Fprintf(&b, "  verify %-30s %s\n", d.Name, d.verdict())
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// VerifyProblems are the verification drills that did not show what they
// must, each with its verdict.
func (p *Plan) VerifyProblems() []string {
	var out []string
	if p.Verify == nil {
		return nil
	}
	for _, d := range p.Verify.Drills {
		if !d.OK {
			out = append(out, d.Name+": "+d.verdict())
		}
	}
	return out
}

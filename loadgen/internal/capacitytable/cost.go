package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/redlocklab/redlocklab/loadgen"
)

// The markers around the cost table in the runbooks' decision guide.
const (
	CostBeginMarker = "<!-- cost:begin -->"
	CostEndMarker   = "<!-- cost:end -->"
)

// costRow is one guard's price, from scripts/cost.sh's runs: DIR/common at
// the rate every guard runs, DIR/sweep for the knee, DIR/over at three
// times it.
type costRow struct {
	guard                string
	rate                 float64 // the common rate
	e2eP50, e2eP99       float64 // ms, at the common rate
	acquireP50, acqP99   float64 // ms; 0 for the guards that report no lock
	cpuPerReserved       float64 // ms, every process; 0: not measured
	reservedShare        float64 // at the common rate
	knee                 float64 // 0: no step met the SLO
	overRate, overGoodpt float64
}

func loadCost(arg string) (costRow, error) {
	guard, dir, ok := strings.Cut(arg, "=")
	if !ok || guard == "" || dir == "" {
		return costRow{}, fmt.Errorf("guard %q: want GUARD=DIR", arg)
	}
	r := costRow{guard: guard}
	rep, err := loadgen.LoadReport(filepath.Join(dir, "common"))
	if err != nil {
		return costRow{}, fmt.Errorf("guard %s: %w", guard, err)
	}
	s := rep.Summary
	r.rate = s.TargetRatePerS
	r.e2eP50, r.e2eP99 = s.E2ELatencyMs.P50, s.E2ELatencyMs.P99
	r.acquireP50, r.acqP99 = s.AcquireLatencyMs.P50, s.AcquireLatencyMs.P99
	r.cpuPerReserved = s.CPUMsPerReserved
	if s.Requests > 0 {
		r.reservedShare = float64(s.Outcomes[loadgen.Reserved.String()]) / float64(s.Requests)
	}
	sw, err := loadgen.LoadSweep(filepath.Join(dir, "sweep"))
	if err != nil {
		return costRow{}, fmt.Errorf("guard %s: %w", guard, err)
	}
	r.knee = sw.Knee
	overDir := filepath.Join(dir, "over")
	if _, err := os.Stat(overDir); err == nil {
		or, err := loadgen.LoadReport(overDir)
		if err != nil {
			return costRow{}, fmt.Errorf("guard %s: %w", guard, err)
		}
		r.overRate, r.overGoodpt = or.Summary.TargetRatePerS, goodput(or.Summary)
	}
	return r, nil
}

func renderCost(w io.Writer, rows []costRow, note string) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "| guard | reservation p50 ms | p99 ms | lock p50 ms | lock p99 ms | CPU per reservation ms | reserved at %.0f/s | knee /s | goodput at 3× knee /s |\n", rows[0].rate)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		knee, over := "none met the SLO", "not run"
		if r.knee > 0 {
			knee = fmt.Sprintf("%.0f", r.knee)
		}
		if r.overRate > 0 {
			over = fmt.Sprintf("%.0f of %.0f offered (%.0f%%)", r.overGoodpt, r.overRate, r.overGoodpt/r.overRate*100)
		}
		fmt.Fprintf(w, "| `%s` | %.2f | %.2f | %s | %s | %s | %.1f%% | %s | %s |\n",
			r.guard, r.e2eP50, r.e2eP99, orDash(r.acquireP50, "%.2f"), orDash(r.acqP99, "%.2f"),
			orDash(r.cpuPerReserved, "%.2f"), r.reservedShare*100, knee, over)
	}
	if note != "" {
		fmt.Fprintln(w)
		fmt.Fprintln(w, note)
	}
}

// runCost renders the cost table of the GUARD=DIR arguments, printed or
// written between the cost markers of doc.
func runCost(args []string, doc, note string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("no guards: give GUARD=DIR, e.g. redlock=runs/cost/redlock")
	}
	var rows []costRow
	for _, a := range args {
		r, err := loadCost(a)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	var b bytes.Buffer
	renderCost(&b, rows, note)
	if doc == "" {
		_, err := stdout.Write(b.Bytes())
		return err
	}
	old, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	updated, err := replaceMarked(old, b.Bytes(), CostBeginMarker, CostEndMarker)
	if err != nil {
		return fmt.Errorf("%s: %w", doc, err)
	}
	return os.WriteFile(doc, updated, 0o644)
}

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
// times it, and the CPU: DIR/idle.json the lab with no load, DIR/low and
// DIR/high two rates well above it, run one after the other.
type costRow struct {
	guard              string
	rate               float64 // the common rate
	e2eP50, e2eP99     float64 // ms, at the common rate
	acquireP50, acqP99 float64 // ms; 0 for the guards that report no lock
	reservedShare      float64 // at the common rate
	// The CPU: marginal is the slope of every process's CPU between
	// the low and the high run (ms per reservation; 0: not measured),
	// lowRate and highRate their reservations per second, lowX and highX
	// their whole CPU per second as multiples of idle, the lab's CPU per
	// second with no load (0: not measured).
	marginal, lowRate, highRate, lowX, highX, idle float64
	knee                                           float64 // 0: no step met the SLO
	kneeAtTop                                      bool    // every step met the SLO: the knee is a lower bound
	overRate, overGoodpt                           float64
}

// cpuPerS is a run's CPU per second of every process it accounted, and
// its reservations per second; ok is false when a process was lost.
func cpuPerS(s loadgen.Summary) (cpu, reserved float64, ok bool) {
	if s.DurationS <= 0 || s.CPUMsPerReserved <= 0 {
		return 0, 0, false
	}
	return (s.GeneratorCPUS + s.ProcessesCPUS) / s.DurationS, float64(s.Outcomes[loadgen.Reserved.String()]) / s.DurationS, true
}

// marginalCPU is the slope of the CPU between two runs, in ms per
// reservation: what one more reservation costs, without the costs that do
// not grow with the rate (the idle lab, the processes' timers).
func marginalCPU(low, high loadgen.Summary) (ms, lowRate, highRate, lowCPU, highCPU float64, ok bool) {
	cl, rl, okl := cpuPerS(low)
	ch, rh, okh := cpuPerS(high)
	if !okl || !okh || rh <= rl {
		return 0, 0, 0, 0, 0, false
	}
	return (ch - cl) / (rh - rl) * 1000, rl, rh, cl, ch, true
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
	if s.Requests > 0 {
		r.reservedShare = float64(s.Outcomes[loadgen.Reserved.String()]) / float64(s.Requests)
	}
	sw, err := loadgen.LoadSweep(filepath.Join(dir, "sweep"))
	if err != nil {
		return costRow{}, fmt.Errorf("guard %s: %w", guard, err)
	}
	r.knee, r.kneeAtTop = sw.Knee, sw.Knee > 0 && !sw.Bounded
	idle, hasIdle, err := readIdle(filepath.Join(dir, "idle.json"))
	if err != nil {
		return costRow{}, fmt.Errorf("guard %s: %w", guard, err)
	}
	if hasIdle {
		r.idle = idle.MsPerS
	}
	if _, err := os.Stat(filepath.Join(dir, "high")); err == nil {
		lo, err := loadgen.LoadReport(filepath.Join(dir, "low"))
		if err != nil {
			return costRow{}, fmt.Errorf("guard %s: %w", guard, err)
		}
		hi, err := loadgen.LoadReport(filepath.Join(dir, "high"))
		if err != nil {
			return costRow{}, fmt.Errorf("guard %s: %w", guard, err)
		}
		if m, rl, rh, cl, ch, ok := marginalCPU(lo.Summary, hi.Summary); ok {
			r.marginal, r.lowRate, r.highRate = m, rl, rh
			if r.idle > 0 {
				r.lowX, r.highX = cl*1000/r.idle, ch*1000/r.idle
			}
		}
	}
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
	fmt.Fprintf(w, "| guard | reservation p50 ms | p99 ms | lock p50 ms | lock p99 ms | reserved at %.0f/s | CPU per reservation ms (marginal) | measured between /s | lab idle CPU ms/s | knee /s | goodput at 3× knee /s |\n", rows[0].rate)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
	atTop := false
	for _, r := range rows {
		knee, over := "none met the SLO", "not run"
		if r.knee > 0 {
			knee = fmt.Sprintf("%.0f", r.knee)
		}
		if r.kneeAtTop {
			knee, atTop = "≥ "+knee, true
		}
		if r.overRate > 0 {
			over = fmt.Sprintf("%.0f of %.0f offered (%.0f%%)", r.overGoodpt, r.overRate, r.overGoodpt/r.overRate*100)
		}
		between := "–"
		if r.marginal > 0 {
			between = fmt.Sprintf("%.0f and %.0f", r.lowRate, r.highRate)
			if r.idle > 0 {
				between += fmt.Sprintf(" (%.1f× and %.1f× idle)", r.lowX, r.highX)
			}
		}
		fmt.Fprintf(w, "| `%s` | %.2f | %.2f | %s | %s | %.1f%% | %s | %s | %s | %s | %s |\n",
			r.guard, r.e2eP50, r.e2eP99, orDash(r.acquireP50, "%.2f"), orDash(r.acqP99, "%.2f"), r.reservedShare*100,
			orDash(r.marginal, "%.2f"), between, orDash(r.idle, "%.0f"), knee, over)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CPU per reservation is marginal: the slope of every process's CPU (the generator with its store, the redis-servers, the etcd members, their supervisors) between the two rates, in the same run, so the lab's idle burn (its own column, measured just before with no load) and the processes' fixed costs drop out. Each knee comes from a sweep that goes on until a step misses the SLO.")
	if atTop {
		fmt.Fprintln(w, "\n≥: every step of that sweep met the SLO up to its bound, so the knee lies at or above it.")
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

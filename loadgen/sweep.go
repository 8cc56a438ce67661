package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// DefaultMaxLateRatio is the share of a run's operations that may be late
// (never sent) before the run says more about the generator than about the
// target: a sweep step over it fails, and a report draws it red.
const DefaultMaxLateRatio = 0.01

// SweepSpec runs the same load at rising rates to find the knee: the highest
// rate whose step met the SLO.
type SweepSpec struct {
	Out   string
	Rates []float64
	// SLO thresholds every step must pass. A step also fails when more than
	// MaxLateRatio of its operations could not be sent (default 1%): a rate
	// the generator or target could not sustain is no capacity.
	SLO          []Threshold
	MaxLateRatio float64
	// KeepGoing runs every rate; by default the sweep stops at the first
	// step that missed the SLO.
	KeepGoing bool
	// UntilMiss goes on past the last of Rates while every step meets the
	// SLO, each step Growth times the one before (default 2), until one
	// misses or the next would pass MaxRate (0: no bound): the knee is then
	// a measured limit, not the top of the list. Ignored with KeepGoing.
	UntilMiss bool
	Growth    float64
	MaxRate   float64
	// RetryMissed runs a step that missed the SLO once more before the
	// sweep stops (its second run is a step of its own, "-again"): one
	// stall of a shared host is not the knee. Ignored with KeepGoing.
	RetryMissed bool
	// Refine runs one more step after the first miss, at the geometric
	// mean of the missed rate and the highest rate that met the SLO, when
	// they are more than refineRatio apart: it halves the gap the knee
	// lies in. Ignored with KeepGoing.
	Refine bool
	// Step runs one step at rate into dir (a fresh directory).
	Step func(ctx context.Context, rate float64, dir string) (*Report, error)
	// Log, when set, gets a line per step.
	Log io.Writer
}

// Sweep is sweep.json.
type Sweep struct {
	SLO          []string `json:"slo"`
	MaxLateRatio float64  `json:"max_late_ratio"`
	Knee         float64  `json:"knee"` // 0: no step met the SLO
	// Bounded is set when a step above the knee missed the SLO: the knee is
	// a measured limit. Unset, every step met it, and the knee is only a
	// lower bound (the top of the sweep).
	Bounded bool        `json:"bounded"`
	Steps   []SweepStep `json:"steps"`
	Started time.Time   `json:"started"`
	Stopped bool        `json:"stopped,omitempty"`
}

// SweepStep is one rate of a sweep.
type SweepStep struct {
	Rate     float64 `json:"rate"`
	Dir      string  `json:"dir"` // relative to the sweep directory
	Pass     bool    `json:"pass"`
	Why      string  `json:"why,omitempty"`
	Achieved float64 `json:"achieved_per_s"`
	// Reserved is goodput: reservations made per second. Achieved counts
	// every operation that ended, refused and failed ones too, so past the
	// knee it keeps climbing while Reserved falls: the collapse a capacity
	// planner looks for.
	Reserved float64 `json:"reserved_per_s"`
	// ReservedShare is the share of the step's operations that reserved.
	ReservedShare float64 `json:"reserved_share"`
	AcquireP99Ms  float64 `json:"acquire_p99_ms"`
	E2EP99Ms      float64 `json:"e2e_p99_ms"`
	Late          int64   `json:"late"`
	Errors        int64   `json:"errors"`
	DoubleGrants  int64   `json:"double_grants"`

	summary Summary
}

// ParseRates parses "500,1000,2000".
func ParseRates(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		r, err := ParseRate(p)
		if err != nil {
			return nil, err
		}
		if r <= 0 {
			return nil, fmt.Errorf("loadgen: sweep rate %q must be > 0", p)
		}
		if len(out) > 0 && r <= out[len(out)-1] {
			return nil, fmt.Errorf("loadgen: sweep rates must rise: %q after %v", p, out[len(out)-1])
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("loadgen: no rates in %q", s)
	}
	return out, nil
}

// RunSweep runs the steps in order and writes sweep.json and the sweep
// report. ctx ending (or stop closing) ends the sweep after the current
// step; what ran is still reported.
func RunSweep(ctx context.Context, spec SweepSpec, stop <-chan struct{}) (*Sweep, error) {
	if len(spec.Rates) == 0 || spec.Step == nil {
		return nil, errors.New("loadgen: sweep needs rates and a step")
	}
	if spec.MaxLateRatio <= 0 {
		spec.MaxLateRatio = DefaultMaxLateRatio
	}
	if _, err := os.Stat(filepath.Join(spec.Out, SweepFile)); err == nil {
		return nil, fmt.Errorf("loadgen: %s already holds a sweep; choose a new --out", spec.Out)
	}
	if err := os.MkdirAll(spec.Out, 0o755); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	sw := &Sweep{MaxLateRatio: spec.MaxLateRatio, Started: time.Now()}
	for _, t := range spec.SLO {
		sw.SLO = append(sw.SLO, t.Expr)
	}
	rates := append([]float64(nil), spec.Rates...)
	refined := false
	retried := map[float64]bool{}
	for i := 0; ; i++ {
		if i == len(rates) {
			next, ok := spec.next(sw.Steps)
			if !ok {
				break
			}
			rates = append(rates, next)
		}
		rate := rates[i]
		select {
		case <-stop:
			sw.Stopped = true
		default:
		}
		if sw.Stopped || ctx.Err() != nil {
			break
		}
		rel := fmt.Sprintf("step-%02d-%s", i+1, strconv.FormatFloat(rate, 'f', -1, 64))
		if retried[rate] {
			rel += "-again"
		}
		r, err := spec.Step(ctx, rate, filepath.Join(spec.Out, rel))
		if err != nil {
			if errors.Is(err, ErrAborted) {
				sw.Stopped = true
				break
			}
			return sw, fmt.Errorf("loadgen: sweep step at %v/s: %w", rate, err)
		}
		st := judgeStep(r, rate, rel, spec.SLO, spec.MaxLateRatio)
		if r.Meta.Stopped {
			sw.Stopped = true
		}
		sw.Steps = append(sw.Steps, st)
		if spec.Log != nil {
			verdict := "met the SLO"
			if !st.Pass {
				verdict = "missed: " + st.Why
			}
			fmt.Fprintf(spec.Log, "sweep: %v/s achieved %.1f/s, acquire p99 %.3fms: %s\n", rate, st.Achieved, st.AcquireP99Ms, verdict)
		}
		if spec.KeepGoing {
			continue
		}
		if !st.Pass && spec.RetryMissed && !retried[rate] {
			retried[rate] = true
			rates = append(rates[:i+1], append([]float64{rate}, rates[i+1:]...)...)
			continue
		}
		if !st.Pass {
			// One refining step at most, then stop.
			mid, ok := refineRate(knee(sw.Steps), rate)
			if !spec.Refine || refined || !ok {
				break
			}
			refined = true
			rates = append(rates[:i+1], mid)
		}
	}
	sw.Knee, sw.Bounded = knee(sw.Steps), bounded(sw.Steps)
	if err := writeJSON(filepath.Join(spec.Out, SweepFile), sw); err != nil {
		return sw, err
	}
	return sw, RenderSweep(spec.Out)
}

// refineRatio is how far apart the knee and the first miss above it must
// be for a refining step (SweepSpec.Refine).
const refineRatio = 1.2

// next is the rate after steps when the listed rates are done: Growth
// times the last, while every step met the SLO (SweepSpec.UntilMiss).
func (spec SweepSpec) next(steps []SweepStep) (float64, bool) {
	if !spec.UntilMiss || spec.KeepGoing || len(steps) == 0 {
		return 0, false
	}
	// A rate counts by its last run (RetryMissed may have run it twice).
	last := map[float64]bool{}
	for _, s := range steps {
		last[s.Rate] = s.Pass
	}
	for _, pass := range last {
		if !pass {
			return 0, false
		}
	}
	g := spec.Growth
	if g <= 1 {
		g = 2
	}
	r := roundRate(steps[len(steps)-1].Rate * g)
	if spec.MaxRate > 0 && r > spec.MaxRate {
		return 0, false
	}
	return r, true
}

// refineRate is the rate halfway (geometrically) between a knee and the
// rate that missed above it, when the two are far enough apart.
func refineRate(knee, missed float64) (float64, bool) {
	if knee <= 0 || missed <= knee*refineRatio {
		return 0, false
	}
	mid := roundRate(math.Sqrt(knee * missed))
	return mid, mid > knee && mid < missed
}

// roundRate rounds a computed rate to two significant digits: steps of
// 1400/s and 2800/s, not 1414.2/s.
func roundRate(r float64) float64 {
	if r < 10 {
		return math.Round(r*10) / 10
	}
	p := math.Pow(10, math.Floor(math.Log10(r))-1)
	return math.Round(r/p) * p
}

func judgeStep(r *Report, rate float64, rel string, slo []Threshold, maxLate float64) SweepStep {
	s := r.Summary
	st := SweepStep{
		Rate: rate, Dir: rel, Achieved: s.ThroughputPerS,
		Reserved: s.ReservedPerS(), ReservedShare: s.ReservedShare(),
		AcquireP99Ms: s.AcquireLatencyMs.P99, E2EP99Ms: s.E2ELatencyMs.P99,
		Late: s.Outcomes[Late.String()], Errors: s.Outcomes[Error.String()],
		DoubleGrants: s.Safety.DoubleGrants, summary: s,
	}
	var why []string
	for _, t := range slo {
		if res := Evaluate(t, r); !res.Pass {
			why = append(why, fmt.Sprintf("%s (got %s)", t.Expr, res.Got))
		}
	}
	if s.Requests > 0 && float64(st.Late)/float64(s.Requests) > maxLate {
		why = append(why, fmt.Sprintf("%d of %d operations could not be sent on time", st.Late, s.Requests))
	}
	if s.Requests == 0 {
		why = append(why, "no operations")
	}
	st.Pass, st.Why = len(why) == 0, strings.Join(why, "; ")
	return st
}

// knee is the highest rate that met the SLO, 0 when none did.
func knee(steps []SweepStep) float64 {
	k := 0.0
	for _, s := range steps {
		if s.Pass && s.Rate > k {
			k = s.Rate
		}
	}
	return k
}

// bounded reports whether a step above the knee missed the SLO.
func bounded(steps []SweepStep) bool {
	k := knee(steps)
	for _, s := range steps {
		if !s.Pass && s.Rate > k {
			return true
		}
	}
	return false
}

// LoadSweep reads the sweep in dir (its sweep.json); LoadReport reads each
// step, in dir joined with the step's Dir.
func LoadSweep(dir string) (*Sweep, error) {
	var sw Sweep
	if err := readJSON(filepath.Join(dir, SweepFile), &sw); err != nil {
		return nil, err
	}
	return &sw, nil
}

// RenderSweep re-renders a sweep directory: every step's reports, then the
// sweep page (report.html with the knee chart) and summary.txt.
func RenderSweep(dir string) error {
	sw, err := LoadSweep(dir)
	if err != nil {
		return err
	}
	var slo []Threshold
	for _, e := range sw.SLO {
		t, err := ParseThreshold(e)
		if err != nil {
			return err
		}
		slo = append(slo, t)
	}
	for i, st := range sw.Steps {
		r, err := LoadReport(filepath.Join(dir, st.Dir))
		if err != nil {
			return err
		}
		r.Judge(slo)
		if err := r.Write(); err != nil {
			return err
		}
		sw.Steps[i] = judgeStep(r, st.Rate, st.Dir, slo, sw.MaxLateRatio)
	}
	sw.Knee, sw.Bounded = knee(sw.Steps), bounded(sw.Steps)
	if err := writeJSON(filepath.Join(dir, SweepFile), sw); err != nil {
		return err
	}
	var txt strings.Builder
	if err := sw.WriteText(&txt); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, TextFile), []byte(txt.String()), 0o644); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	return writeHTML(filepath.Join(dir, HTMLFile), sw.htmlData())
}

// IsSweep reports whether dir holds a sweep rather than a single run.
func IsSweep(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, SweepFile))
	return err == nil
}

// WriteText prints the sweep table and the knee.
func (sw *Sweep) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "sweep: SLO %s (and at most %.1f%% of operations late)\n", strings.Join(sw.SLO, " && "), sw.MaxLateRatio*100)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rate/s\tachieved/s\treserved/s\treserved\tacquire p99 ms\te2e p99 ms\tlate\terrors\tdouble grants\tverdict\t")
	for _, s := range sw.Steps {
		verdict := "met"
		if !s.Pass {
			verdict = "missed"
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f%%\t%.3f\t%.3f\t%d\t%d\t%d\t%s\t\n", strconv.FormatFloat(s.Rate, 'f', -1, 64), s.Achieved, s.Reserved, s.ReservedShare*100, s.AcquireP99Ms, s.E2EP99Ms, s.Late, s.Errors, s.DoubleGrants, verdict)
	}
	tw.Flush()
	for _, s := range sw.Steps {
		if !s.Pass {
			fmt.Fprintf(&b, "%s/s missed: %s\n", strconv.FormatFloat(s.Rate, 'f', -1, 64), s.Why)
		}
	}
	switch {
	case sw.Knee > 0 && sw.Bounded:
		fmt.Fprintf(&b, "knee: %s/s (the highest rate that met the SLO; a higher one missed it)\n", strconv.FormatFloat(sw.Knee, 'f', -1, 64))
	case sw.Knee > 0:
		fmt.Fprintf(&b, "knee: at least %s/s (every rate met the SLO: the knee lies at or above the top of the sweep)\n", strconv.FormatFloat(sw.Knee, 'f', -1, 64))
	default:
		b.WriteString("knee: none (no rate met the SLO)\n")
	}
	if sw.Stopped {
		b.WriteString("(the sweep was stopped early)\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// sweepView is the sweep page's data.
type sweepView struct {
	SLOText  string          `json:"slo_text"`
	SLOMs    optFloat        `json:"slo_ms"`
	Knee     float64         `json:"knee"`
	HasKnee  bool            `json:"-"`
	KneeText string          `json:"-"`
	Steps    []sweepStepView `json:"steps"`
}

type sweepStepView struct {
	Rate       float64  `json:"rate"`
	Achieved   float64  `json:"achieved"`
	Reserved   float64  `json:"reserved"`
	Share      float64  `json:"reserved_share"`
	AcquireP99 optFloat `json:"acquire_p99_ms"`
	E2EP99     optFloat `json:"e2e_p99_ms"`
	Pass       bool     `json:"pass"`
	Why        string   `json:"why"`
	Dir        string   `json:"dir"`
	Summary    Summary  `json:"-"`
}

func (sw *Sweep) htmlData() *htmlData {
	v := &sweepView{SLOText: strings.Join(sw.SLO, " && "), SLOMs: optFloat(math.NaN()), Knee: sw.Knee,
		HasKnee: sw.Knee > 0, KneeText: strconv.FormatFloat(sw.Knee, 'f', -1, 64)}
	if !sw.Bounded && sw.Knee > 0 {
		v.KneeText = "≥ " + v.KneeText
	}
	// The chart draws the SLO line when there is one acquire.p99-style bound.
	for _, e := range sw.SLO {
		if t, err := ParseThreshold(e); err == nil && t.ParsedMetric().IsLatency() && t.ParsedMetric().Head() == TagAcquire {
			v.SLOMs = optFloat(t.Value / 1e6)
			break
		}
	}
	for _, s := range sw.Steps {
		sv := sweepStepView{Rate: s.Rate, Achieved: s.Achieved, Reserved: s.Reserved, Share: s.ReservedShare, Pass: s.Pass, Why: s.Why, Dir: s.Dir, Summary: s.summary,
			AcquireP99: optFloat(math.NaN()), E2EP99: optFloat(math.NaN())}
		if s.summary.AcquireLatencyMs.Count > 0 {
			sv.AcquireP99 = optFloat(s.AcquireP99Ms)
		}
		if s.summary.E2ELatencyMs.Count > 0 {
			sv.E2EP99 = optFloat(s.E2EP99Ms)
		}
		v.Steps = append(v.Steps, sv)
	}
	d := &htmlData{
		Title:     "redlab sweep report",
		Subtitle:  fmt.Sprintf("%d steps · SLO %s · started %s", len(sw.Steps), v.SLOText, sw.Started.UTC().Format(time.RFC3339)),
		Generated: time.Now().UTC().Format(time.RFC3339),
		Sweep:     v,
	}
	d.JSON = marshalJS(htmlPayload{Sweep: v, Faults: []faultSpan{}})
	return d
}

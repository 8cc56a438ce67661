package plan

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/redlocklab/redlocklab/loadgen"
)

// Hold is the time the critical section holds the lock: a distribution the
// user gave, or the hold histogram of a load run.
type Hold struct {
	// From says where it comes from: the distribution ("uniform:5s:9s")
	// or the run's histogram ("runs/x/hold.hgrm").
	From string `json:"from"`
	// Spec is the distribution, when one was given; the drills hold for
	// it, or for the histogram's median to its maximum.
	Spec loadgen.HoldSpec `json:"-"`
	// Dist is its percentiles and curve.
	Dist Dist `json:"dist"`
	// P50 and Max are the median and the tail the rules read.
	P50 time.Duration `json:"-"`
	Max time.Duration `json:"-"`
}

// HoldOf is the hold distribution h (const or uniform).
func HoldOf(h loadgen.HoldSpec) (Hold, error) {
	if h.IsZero() {
		return Hold{}, errors.New("plan: a hold of 0: give the time the critical section holds the lock")
	}
	at := func(p float64) time.Duration { return h.Min + time.Duration(float64(h.Max-h.Min)*p/100) }
	d := Dist{P50: msOf(at(50)), P99: msOf(at(99)), P999: msOf(at(99.9)), Max: msOf(h.Max)}
	for _, p := range curvePercentiles {
		d.Curve = append(d.Curve, Point{X: p, Y: msOf(at(p))})
	}
	return Hold{From: h.String(), Spec: h, Dist: d, P50: at(50), Max: h.Max}, nil
}

// HoldFrom reads the hold histogram of the load run in dir (its raw
// record, which hold.hgrm is rendered from).
func HoldFrom(dir string) (Hold, error) {
	r, err := loadgen.LoadReport(dir)
	if err != nil {
		return Hold{}, fmt.Errorf("plan: --hold-from %s: %w", dir, err)
	}
	h := r.Totals.Hold
	if h == nil || h.TotalCount() == 0 {
		return Hold{}, fmt.Errorf("plan: --hold-from %s: the run recorded no hold (was it run with --hold, through a lock guard?)", dir)
	}
	d := Dist{Count: h.TotalCount(), P50: nsMs(h.ValueAtQuantile(50)), P99: nsMs(h.ValueAtQuantile(99)),
		P999: nsMs(h.ValueAtQuantile(99.9)), Max: nsMs(h.Max())}
	for _, p := range curvePercentiles {
		v := h.ValueAtQuantile(p)
		if p == 100 {
			v = h.Max()
		}
		d.Curve = append(d.Curve, Point{X: p, Y: nsMs(v)})
	}
	return Hold{From: filepath.Join(dir, loadgen.TagHold+".hgrm"), Dist: d, P50: durMs(d.P50), Max: durMs(d.Max)}, nil
}

func nsMs(ns int64) float64 { return float64(ns/1000) / 1e3 }

// drillHold is the hold the verification drills use for the user's
// critical section: the distribution given, or the histogram's median to
// its maximum.
func (h Hold) drillHold() loadgen.HoldSpec {
	if !h.Spec.IsZero() {
		return h.Spec
	}
	lo := h.P50.Round(time.Millisecond)
	return loadgen.HoldSpec{Min: min(lo, h.Max), Max: h.Max.Round(time.Millisecond)}
}

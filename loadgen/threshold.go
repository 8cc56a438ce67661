package loadgen

import (
	"fmt"
	"strconv"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/redlocklab/redlocklab/loadgen/loadspec"
)

// The threshold grammar is package loadspec's; here it is judged against
// a run's report.
type (
	// Threshold is a pass/fail condition on a run (loadspec.Threshold).
	Threshold = loadspec.Threshold
	// Metric is one figure of a run a threshold judges.
	Metric = loadspec.Metric
	// Comparison is a threshold's operator and value.
	Comparison = loadspec.Comparison
)

// ParseThreshold parses one threshold expression.
func ParseThreshold(s string) (Threshold, error) { return loadspec.ParseThreshold(s) }

// ParseMetric parses a metric's name.
func ParseMetric(name string) (Metric, error) { return loadspec.ParseMetric(name) }

// ParseComparison parses OP VALUE (loadspec.ParseComparison).
func ParseComparison(s string, latency bool) (Comparison, error) {
	return loadspec.ParseComparison(s, latency)
}

// Compare reports whether v op want holds; false for an unknown op.
func Compare(v float64, op string, want float64) bool { return loadspec.Compare(v, op, want) }

// MetricHeads lists the first word of every metric but node<N>.
func MetricHeads() []string { return loadspec.MetricHeads() }

// ThresholdResult is a threshold judged against a run.
type ThresholdResult struct {
	Expr string  `json:"expr"`
	Pass bool    `json:"pass"`
	Got  string  `json:"got"`
	Raw  float64 `json:"value"`
}

// Evaluate judges the threshold against a report. A metric with no
// samples (an acquire percentile with a guard that takes no lock) fails.
func Evaluate(t Threshold, r *Report) ThresholdResult {
	f := measure(t.ParsedMetric(), r, t.Percent())
	res := ThresholdResult{Expr: t.Expr, Got: f.Got}
	if f.OK {
		res.Raw, res.Pass = f.Value, t.Holds(f.Value)
	}
	return res
}

// Figure is a metric read from a report: Value, Got as reports show it;
// OK false when there is no figure (Got says why: no samples, not checked).
type Figure struct {
	Value float64
	Got   string
	OK    bool
}

// Measure reads the metric from a report, counts as counts.
func Measure(m Metric, r *Report) Figure { return measure(m, r, false) }

// measure reads the metric; pct reads a count as a share of the requests.
func measure(m Metric, r *Report, pct bool) Figure {
	head, stat := m.Head(), m.Stat()
	s := r.Summary
	num := func(v float64) Figure {
		return Figure{v, strconv.FormatFloat(v, 'f', -1, 64), true}
	}
	share := func(n int64) Figure {
		if !pct {
			return num(float64(n))
		}
		if s.Requests == 0 {
			return Figure{Got: "no requests"}
		}
		f := float64(n) / float64(s.Requests)
		return Figure{f, fmt.Sprintf("%.3f%%", f*100), true}
	}
	switch {
	case m.IsLatency() || head == TagAttempts:
		h := r.Totals.ByTag(head)
		if h == nil || h.TotalCount() == 0 {
			return Figure{Got: fmt.Sprintf("no %s samples", head)}
		}
		q, _ := loadspec.ParseStat(stat)
		v := statOf(h, q)
		if m.IsLatency() {
			return Figure{v, time.Duration(v).Round(time.Microsecond).String(), true}
		}
		return num(v)
	case head == "safety":
		sf := s.Safety
		checked := sf.AuditChecked
		var v int64
		switch stat {
		case "double_grants":
			v, checked = sf.DoubleGrants, sf.DoubleGrantsChecked
		case "lock_violations":
			v, checked = sf.LockViolations, sf.DoubleGrantsChecked
		case "lost_updates":
			v = sf.LostUpdates
		case "oversell":
			v = sf.Oversell
		case "fenced_rejections":
			v = sf.FencedRejections
		case "violations":
			v, checked = sf.Violations(), sf.AuditChecked || sf.DoubleGrantsChecked
		}
		if !checked {
			return Figure{Got: "not checked"}
		}
		return num(float64(v))
	case head == "outcomes":
		return share(s.Outcomes[stat])
	case m.Name == "late_starts":
		return share(s.LateStarts)
	case m.Name == "throughput":
		return num(s.ThroughputPerS)
	case m.Name == "requests":
		return num(float64(s.Requests))
	case m.Name == "version_conflicts":
		return num(float64(s.VersionConflicts))
	}
	return Figure{Got: "unknown metric"}
}

func statOf(h *hdr.Histogram, q float64) float64 {
	switch q {
	case -1:
		return float64(h.Min())
	case -2:
		mean, _ := histStats(h)
		return mean
	case 100:
		return float64(h.Max())
	}
	return float64(atPercentile(h, q))
}

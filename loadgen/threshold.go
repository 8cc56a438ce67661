package loadgen

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Threshold is a pass/fail condition on a run, like k6's:
//
//	acquire.p99<20ms        latency: e2e, e2e_uncorrected, acquire, hold,
//	e2e.p999<=1s            release, node<N> (N from 1); stat pNN (p50, p99,
//	node1.max<50ms          p999 = 99.9, p99.99…), min, max, mean; the value
//	                        needs a unit
//	attempts.mean<1.5       attempts: pNN, min, max, mean (a count)
//	safety.lost_updates==0  safety: double_grants, lock_violations,
//	                        lost_updates, oversell, fenced_rejections
//	outcomes.error<10       outcomes.<name>: a count, or a share of requests
//	outcomes.late<1%        with a % value
//	throughput>=500         operations ended per second
//	requests>0, late_starts<1%
//	version_conflicts>0     db-version's tries lost to a concurrent write
//
// Operators: < <= > >= == !=.
type Threshold struct {
	Expr   string
	Metric string
	Op     string
	Value  float64 // ns for latencies, a fraction for % values
	kind   metricKind
	pct    bool
}

type metricKind uint8

const (
	kindLatency metricKind = iota
	kindNumber
)

var thresholdRE = regexp.MustCompile(`^\s*([a-z0-9_.]+)\s*(<=|>=|==|!=|<|>)\s*([^\s]+)\s*$`)

var latencyTags = map[string]bool{TagE2E: true, TagE2EUncorrected: true, TagAcquire: true, TagHold: true, TagRelease: true}

// ParseThreshold parses one threshold expression.
func ParseThreshold(s string) (Threshold, error) {
	m := thresholdRE.FindStringSubmatch(s)
	if m == nil {
		return Threshold{}, fmt.Errorf("loadgen: threshold %q: want METRIC OP VALUE, like acquire.p99<20ms or safety.lost_updates==0", s)
	}
	t := Threshold{Expr: strings.TrimSpace(s), Metric: m[1], Op: m[2]}
	bad := func(format string, a ...any) (Threshold, error) {
		return Threshold{}, fmt.Errorf("loadgen: threshold %q: "+format, append([]any{t.Expr}, a...)...)
	}
	val := m[3]
	head, stat, _ := strings.Cut(t.Metric, ".")
	switch {
	case latencyTags[head] || isNodeTag(head):
		if _, err := parseStat(stat); err != nil {
			return bad("%v", err)
		}
		d, err := time.ParseDuration(val)
		if err != nil {
			return bad("%s is a latency: give a unit, like 20ms or 1.5s", t.Metric)
		}
		t.kind, t.Value = kindLatency, float64(d)
		return t, nil
	case head == TagAttempts:
		if _, err := parseStat(stat); err != nil {
			return bad("%v", err)
		}
	case head == "safety":
		switch stat {
		case "double_grants", "lock_violations", "lost_updates", "oversell", "fenced_rejections", "violations":
		default:
			return bad("unknown safety metric %q (double_grants, lock_violations, lost_updates, oversell, fenced_rejections, violations)", stat)
		}
	case head == "outcomes":
		if _, ok := parseOutcome(stat); !ok {
			return bad("unknown outcome %q (%s)", stat, strings.Join(outcomeNames[:], ", "))
		}
	case t.Metric == "throughput" || t.Metric == "requests" || t.Metric == "late_starts" || t.Metric == "version_conflicts":
	case strings.HasPrefix(head, "node"):
		return bad("unknown metric %q: lock nodes are node1, node2, … (numbered from 1)", head)
	default:
		return bad("unknown metric %q", t.Metric)
	}
	t.kind = kindNumber
	if strings.HasSuffix(val, "%") {
		if head != "outcomes" && t.Metric != "late_starts" {
			return bad("a %% value applies to outcomes.<name> and late_starts only")
		}
		t.pct = true
		val = strings.TrimSuffix(val, "%")
	}
	v, err := strconv.ParseFloat(val, 64)
	if err != nil || math.IsNaN(v) {
		return bad("value %q is not a number", m[3])
	}
	if t.pct {
		v /= 100
	}
	t.Value = v
	return t, nil
}

func isNodeTag(s string) bool {
	_, ok := nodeIndex(s)
	return ok
}

// parseStat reads p50, p999 (99.9), p99.99, min, max, mean; it returns the
// percentile, with -1 for min, 100 for max and -2 for mean.
func parseStat(s string) (float64, error) {
	switch s {
	case "min":
		return -1, nil
	case "max", "p100":
		return 100, nil
	case "mean", "avg":
		return -2, nil
	}
	if !strings.HasPrefix(s, "p") || len(s) < 2 {
		return 0, fmt.Errorf("unknown statistic %q (pNN, min, max, mean)", s)
	}
	digits := s[1:]
	if !strings.Contains(digits, ".") && len(digits) > 2 {
		digits = digits[:2] + "." + digits[2:] // p999 → 99.9
	}
	q, err := strconv.ParseFloat(digits, 64)
	if err != nil || q <= 0 || q > 100 {
		return 0, fmt.Errorf("unknown statistic %q (pNN, min, max, mean)", s)
	}
	return q, nil
}

// ThresholdResult is a threshold judged against a run.
type ThresholdResult struct {
	Expr string  `json:"expr"`
	Pass bool    `json:"pass"`
	Got  string  `json:"got"`
	Raw  float64 `json:"value"`
}

// Eval judges the threshold against a report. A metric with no samples (an
// acquire percentile with a guard that takes no lock) fails.
func (t Threshold) Eval(r *Report) ThresholdResult {
	res := ThresholdResult{Expr: t.Expr}
	v, got, ok := t.value(r)
	if !ok {
		res.Got = got
		return res
	}
	res.Raw, res.Got = v, got
	switch t.Op {
	case "<":
		res.Pass = v < t.Value
	case "<=":
		res.Pass = v <= t.Value
	case ">":
		res.Pass = v > t.Value
	case ">=":
		res.Pass = v >= t.Value
	case "==":
		res.Pass = v == t.Value
	case "!=":
		res.Pass = v != t.Value
	}
	return res
}

func (t Threshold) value(r *Report) (float64, string, bool) {
	head, stat, _ := strings.Cut(t.Metric, ".")
	s := r.Summary
	num := func(v float64) (float64, string, bool) {
		return v, strconv.FormatFloat(v, 'f', -1, 64), true
	}
	share := func(n int64) (float64, string, bool) {
		if !t.pct {
			return num(float64(n))
		}
		if s.Requests == 0 {
			return 0, "no requests", false
		}
		f := float64(n) / float64(s.Requests)
		return f, fmt.Sprintf("%.3f%%", f*100), true
	}
	switch {
	case t.kind == kindLatency || head == TagAttempts:
		h := r.Totals.ByTag(head)
		if h == nil || h.TotalCount() == 0 {
			return 0, fmt.Sprintf("no %s samples", head), false
		}
		q, _ := parseStat(stat)
		v := statOf(h, q)
		if t.kind == kindLatency {
			return v, time.Duration(v).Round(time.Microsecond).String(), true
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
			return 0, "not checked", false
		}
		return num(float64(v))
	case head == "outcomes":
		return share(s.Outcomes[stat])
	case t.Metric == "late_starts":
		return share(s.LateStarts)
	case t.Metric == "throughput":
		return num(s.ThroughputPerS)
	case t.Metric == "requests":
		return num(float64(s.Requests))
	case t.Metric == "version_conflicts":
		return num(float64(s.VersionConflicts))
	}
	return 0, "unknown metric", false
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

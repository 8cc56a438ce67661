package loadspec

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Histogram tags, in the .hlog and in file names. Per-node SET latency is
// tagged node1, node2, … (see NodeIndex).
const (
	TagE2E            = "e2e"
	TagE2EUncorrected = "e2e_uncorrected"
	TagAcquire        = "acquire"
	TagHold           = "hold"
	TagRelease        = "release"
	TagAttempts       = "attempts"
)

// Outcomes are the names of a request's outcomes, in report order (the
// load generator's Outcome values, in the same order).
var Outcomes = []string{"reserved", "out_of_stock", "contended", "unavailable", "overloaded", "fenced", "version_conflict", "error",
	"refused", "unknown", "http_4xx", "http_5xx", "late"}

// MaxNodes bounds the node tags read back from a log.
const MaxNodes = 1024

// NodeIndex is the 0-based index of tag nodeN (N from 1, in canonical
// decimal form, at most MaxNodes); ok is false for anything else, node0
// included.
func NodeIndex(tag string) (i int, ok bool) {
	digits, found := strings.CutPrefix(tag, "node")
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 1 || n > MaxNodes || strconv.Itoa(n) != digits {
		return 0, false
	}
	return n - 1, true
}

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
// Operators: < <= > >= == !=. A threshold is a Metric and a Comparison;
// each parses on its own, for judges that compare figures of their own
// (a drill's grants in a phase, its recovery time) or one figure with
// another.
type Threshold struct {
	Expr   string
	Metric string
	Comparison
	m   Metric
	pct bool
}

type metricKind uint8

const (
	kindNumber metricKind = iota
	kindLatency
)

var (
	thresholdRE  = regexp.MustCompile(`^\s*([a-z0-9_.]+)\s*(<=|>=|==|!=|<|>)\s*([^\s]+)\s*$`)
	comparisonRE = regexp.MustCompile(`^\s*(<=|>=|==|!=|<|>)\s*([^\s]+)\s*$`)
)

var latencyTags = map[string]bool{TagE2E: true, TagE2EUncorrected: true, TagAcquire: true, TagHold: true, TagRelease: true}

// metricHeads are the first words of the metrics other than node<N>.
var metricHeads = []string{TagE2E, TagE2EUncorrected, TagAcquire, TagHold, TagRelease, TagAttempts,
	"safety", "outcomes", "throughput", "requests", "late_starts", "version_conflicts"}

// MetricHeads lists the first word of every metric (before its first dot),
// but node<N>: the names a metric may start with.
func MetricHeads() []string { return append([]string(nil), metricHeads...) }

// safetyMetrics are the counts safety.<name> reads.
var safetyMetrics = []string{"double_grants", "lock_violations", "lost_updates", "oversell", "fenced_rejections", "violations"}

// Metric is one figure of a run a threshold judges, like acquire.p99 or
// safety.double_grants.
type Metric struct {
	Name       string
	head, stat string
	kind       metricKind
}

// ParseMetric parses a metric's name.
func ParseMetric(name string) (Metric, error) {
	m := Metric{Name: name}
	m.head, m.stat, _ = strings.Cut(name, ".")
	switch head, stat := m.head, m.stat; {
	case latencyTags[head] || isNodeTag(head):
		if _, err := ParseStat(stat); err != nil {
			return m, err
		}
		m.kind = kindLatency
		return m, nil
	case head == TagAttempts:
		if _, err := ParseStat(stat); err != nil {
			return m, err
		}
	case head == "safety":
		if !slices.Contains(safetyMetrics, stat) {
			return m, fmt.Errorf("unknown safety metric %q (%s)", stat, strings.Join(safetyMetrics, ", "))
		}
	case head == "outcomes":
		if !slices.Contains(Outcomes, stat) {
			return m, fmt.Errorf("unknown outcome %q (%s)", stat, strings.Join(Outcomes, ", "))
		}
	case name == "throughput" || name == "requests" || name == "late_starts" || name == "version_conflicts":
	case strings.HasPrefix(head, "node"):
		return m, fmt.Errorf("unknown metric %q: lock nodes are node1, node2, … (numbered from 1)", head)
	default:
		return m, fmt.Errorf("unknown metric %q", name)
	}
	m.kind = kindNumber
	return m, nil
}

// IsLatency reports whether the metric is a latency: its values take a
// unit.
func (m Metric) IsLatency() bool { return m.kind == kindLatency }

// IsSafety reports whether the metric is a safety count (safety.<name>).
func (m Metric) IsSafety() bool { return m.head == "safety" }

// Head is the metric's first word (acquire, safety, outcomes, node2…),
// and Stat what follows its first dot (p99, lost_updates, "").
func (m Metric) Head() string { return m.head }

// Stat is what follows the metric's first dot (p99, lost_updates, "").
func (m Metric) Stat() string { return m.stat }

// takesPercent reports whether a value of the metric may be a share of
// the requests (outcomes.<name>, late_starts).
func (m Metric) takesPercent() bool { return m.head == "outcomes" || m.Name == "late_starts" }

// Comparison is a threshold's operator and value: ns for a latency, a
// fraction for a % value.
type Comparison struct {
	Op    string
	Value float64
}

// ParseComparison parses OP VALUE, like <=2 or, for a latency (a value
// with a unit), <1.5s.
func ParseComparison(s string, latency bool) (Comparison, error) {
	m := comparisonRE.FindStringSubmatch(s)
	if m == nil {
		return Comparison{}, fmt.Errorf("want OP VALUE, like <=2, with OP one of < <= > >= == !=")
	}
	return parseValue(m[1], m[2], latency)
}

func parseValue(op, val string, latency bool) (Comparison, error) {
	c := Comparison{Op: op}
	if latency {
		d, err := time.ParseDuration(val)
		if err != nil {
			return c, fmt.Errorf("a latency takes a unit, like 20ms or 1.5s")
		}
		c.Value = float64(d)
		return c, nil
	}
	v, err := strconv.ParseFloat(val, 64)
	if err != nil || math.IsNaN(v) {
		return c, fmt.Errorf("value %q is not a number", val)
	}
	c.Value = v
	return c, nil
}

// Holds reports whether v meets the comparison.
func (c Comparison) Holds(v float64) bool { return Compare(v, c.Op, c.Value) }

// Compare reports whether v op want holds; false for an unknown op.
func Compare(v float64, op string, want float64) bool {
	switch op {
	case "<":
		return v < want
	case "<=":
		return v <= want
	case ">":
		return v > want
	case ">=":
		return v >= want
	case "==":
		return v == want
	case "!=":
		return v != want
	}
	return false
}

// ParseThreshold parses one threshold expression.
func ParseThreshold(s string) (Threshold, error) {
	m := thresholdRE.FindStringSubmatch(s)
	if m == nil {
		return Threshold{}, fmt.Errorf("loadgen: threshold %q: want METRIC OP VALUE, like acquire.p99<20ms or safety.lost_updates==0", s)
	}
	t := Threshold{Expr: strings.TrimSpace(s), Metric: m[1]}
	bad := func(format string, a ...any) (Threshold, error) {
		return Threshold{}, fmt.Errorf("loadgen: threshold %q: "+format, append([]any{t.Expr}, a...)...)
	}
	var err error
	if t.m, err = ParseMetric(t.Metric); err != nil {
		return bad("%v", err)
	}
	val := m[3]
	if strings.HasSuffix(val, "%") && !t.m.IsLatency() {
		if !t.m.takesPercent() {
			return bad("a %% value applies to outcomes.<name> and late_starts only")
		}
		t.pct = true
		val = strings.TrimSuffix(val, "%")
	}
	if t.Comparison, err = parseValue(m[2], val, t.m.IsLatency()); err != nil {
		if t.m.IsLatency() {
			return bad("%s is a latency: give a unit, like 20ms or 1.5s", t.Metric)
		}
		return bad("value %q is not a number", m[3])
	}
	if t.pct {
		t.Value /= 100
	}
	return t, nil
}

// ParsedMetric is the metric the threshold judges.
func (t Threshold) ParsedMetric() Metric { return t.m }

// Percent reports whether the value is a share of the requests (a %
// value), Value then a fraction.
func (t Threshold) Percent() bool { return t.pct }

func isNodeTag(s string) bool {
	_, ok := NodeIndex(s)
	return ok
}

// ParseStat reads p50, p999 (99.9), p99.99, min, max, mean; it returns the
// percentile, with -1 for min, 100 for max and -2 for mean.
func ParseStat(s string) (float64, error) {
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

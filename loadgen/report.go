package loadgen

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
)

// Report is a run directory read back: the totals, the time series and the
// safety verdict, from which every output is rendered.
type Report struct {
	Dir        string
	Meta       Meta
	Safety     Safety
	Totals     *HistSet
	Series     Series
	Faults     []faultlog.Fault // shaded in the charts
	Summary    Summary
	Thresholds []ThresholdResult
}

// Series is the per-interval view of a run, for the charts.
type Series struct {
	T            []float64                        `json:"t"` // interval start, seconds from the run start
	Dur          []float64                        `json:"dur"`
	Throughput   []float64                        `json:"throughput"` // operations ended per second
	TargetRate   []float64                        `json:"target_rate"`
	InFlight     []int64                          `json:"in_flight"`
	LateStarts   []int64                          `json:"late_starts"`
	DoubleGrants []int64                          `json:"double_grants"` // running total
	Outcomes     map[string][]int64               `json:"outcomes"`
	Latency      map[string]map[string][]optFloat `json:"latency"` // tag → p50|p90|p99|p999|max → ms
}

// optFloat is a number that is null in JSON when NaN (no samples).
type optFloat float64

func (f optFloat) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(f), 'f', -1, 64), nil
}

func (f *optFloat) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = optFloat(math.NaN())
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	*f = optFloat(v)
	return err
}

var seriesStats = []struct {
	name string
	q    float64 // percentile; 100 = max
}{{"p50", 50}, {"p90", 90}, {"p99", 99}, {"p999", 99.9}, {"max", 100}}

var seriesQuantiles = func() []float64 {
	qs := make([]float64, len(seriesStats))
	for i, st := range seriesStats {
		qs[i] = st.q
	}
	return qs
}()

// LoadReport reads a run directory. It fails on a directory without a run.
func LoadReport(dir string) (*Report, error) {
	meta, err := readMeta(dir)
	if err != nil {
		return nil, err
	}
	r := &Report{Dir: dir, Meta: meta, Totals: NewHistSet(len(meta.Nodes))}
	if r.Safety, err = readSafety(dir); err != nil {
		return nil, err
	}
	base := meta.Started.UnixMilli()
	interval := meta.Interval()
	var recs []IntervalRecord
	err = readIntervals(dir, func(rec IntervalRecord) error {
		i := intervalIndex(rec.StartMs, base, interval)
		if i < 0 {
			return nil
		}
		for len(recs) <= i {
			recs = append(recs, IntervalRecord{Index: -1})
		}
		recs[i] = rec
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.initSeries(recs)
	err = readHlogFile(dir, func(e *hlogEntry) error {
		r.addHist(e, intervalIndex(e.StartMs, base, interval))
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Counters live in intervals.jsonl; the totals take them from there.
	for _, rec := range recs {
		r.Totals.addRecordCounts(rec)
	}
	if r.Faults, err = faultlog.Read(filepath.Join(dir, FaultsFile)); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	r.Summary = buildSummary(r)
	return r, nil
}

func (h *HistSet) addRecordCounts(rec IntervalRecord) {
	if rec.Index < 0 {
		return
	}
	for name, c := range rec.Outcomes {
		if o, ok := parseOutcome(name); ok {
			h.Outcomes[o] += c
		}
	}
	h.LateStarts += rec.LateStarts
	h.Clamped += rec.Clamped
	h.VersionConflicts += rec.VersionConflicts
	h.growNodes(len(rec.NodeOutcomes))
	for i, m := range rec.NodeOutcomes {
		for j, name := range nodeOutcomeNames {
			h.NodeOutcomes[i][j] += m[name]
		}
	}
}

func (r *Report) initSeries(recs []IntervalRecord) {
	s := &r.Series
	n := len(recs)
	s.T, s.Dur, s.Throughput, s.TargetRate = make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	s.InFlight, s.LateStarts, s.DoubleGrants = make([]int64, n), make([]int64, n), make([]int64, n)
	s.Outcomes = map[string][]int64{}
	for _, name := range outcomeNames {
		s.Outcomes[name] = make([]int64, n)
	}
	s.Latency = map[string]map[string][]optFloat{}
	base := r.Meta.Started.UnixMilli()
	iv := r.Meta.Interval().Seconds()
	var dg int64
	for i, rec := range recs {
		s.T[i] = float64(i) * iv
		if rec.Index < 0 { // a gap: nothing was recorded
			s.Dur[i] = iv
			s.DoubleGrants[i] = dg
			continue
		}
		s.T[i] = float64(rec.StartMs-base) / 1000
		d := float64(rec.EndMs-rec.StartMs) / 1000
		if d <= 0 {
			d = iv
		}
		s.Dur[i] = d
		var ended int64
		for name, c := range rec.Outcomes {
			if col, ok := s.Outcomes[name]; ok {
				col[i] = c
			}
			if name != Late.String() {
				ended += c
			}
		}
		s.Throughput[i] = math.Round(float64(ended)/d*100) / 100
		s.TargetRate[i] = rec.TargetRate
		s.InFlight[i] = rec.InFlight
		s.LateStarts[i] = rec.LateStarts
		dg += rec.DoubleGrants
		s.DoubleGrants[i] = dg
	}
}

func (r *Report) addHist(e *hlogEntry, i int) {
	dst := r.Totals.ByTag(e.Tag)
	if dst == nil {
		if n, ok := nodeIndex(e.Tag); ok {
			r.Totals.growNodes(n + 1)
			dst = r.Totals.Nodes[n]
		}
	}
	if dst == nil {
		return // a tag this version does not know
	}
	mergeHist(dst, e.Hist)
	if i < 0 || i >= len(r.Series.T) {
		return
	}
	cols := r.Series.Latency[e.Tag]
	if cols == nil {
		cols = make(map[string][]optFloat, len(seriesStats))
		for _, st := range seriesStats {
			col := make([]optFloat, len(r.Series.T))
			for j := range col {
				col[j] = optFloat(math.NaN())
			}
			cols[st.name] = col
		}
		r.Series.Latency[e.Tag] = cols
	}
	if e.Hist.TotalCount() == 0 {
		return
	}
	scale := 1e6
	if e.Tag == TagAttempts {
		scale = 1
	}
	vals := atPercentiles(e.Hist, seriesQuantiles...)
	for j, st := range seriesStats {
		cols[st.name][i] = optFloat(math.Round(float64(vals[j])/scale*1000) / 1000)
	}
}

func (r *Report) duration() time.Duration {
	if !r.Meta.Ended.IsZero() && r.Meta.Ended.After(r.Meta.Started) {
		return r.Meta.Ended.Sub(r.Meta.Started)
	}
	s := r.Series
	if n := len(s.T); n > 0 {
		return time.Duration((s.T[n-1] + s.Dur[n-1]) * float64(time.Second))
	}
	return 0
}

// plannedRate is the schedule's mean rate: planned operations over the
// profile's length (the drain after the schedule is not part of it).
func (r *Report) plannedRate() float64 {
	if st, err := ParseStages(r.Meta.Stages); err == nil && r.Meta.Planned > 0 {
		var d time.Duration
		for _, x := range st {
			d += x.Duration
		}
		if d > 0 {
			return float64(r.Meta.Planned) / d.Seconds()
		}
	}
	var ops, secs float64
	for i, rate := range r.Series.TargetRate {
		ops += rate * r.Series.Dur[i]
		secs += r.Series.Dur[i]
	}
	if secs == 0 {
		return 0
	}
	return ops / secs
}

// RecordedThresholds parses the thresholds the run was judged by.
func (r *Report) RecordedThresholds() ([]Threshold, error) {
	var out []Threshold
	for _, e := range r.Meta.Thresholds {
		t, err := ParseThreshold(e)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Judge evaluates thresholds against the report and records the results in
// its summary. It returns the failed ones.
func (r *Report) Judge(ths []Threshold) []ThresholdResult {
	r.Thresholds = r.Thresholds[:0]
	var failed []ThresholdResult
	for _, t := range ths {
		res := Evaluate(t, r)
		r.Thresholds = append(r.Thresholds, res)
		if !res.Pass {
			failed = append(failed, res)
		}
	}
	r.Summary.Thresholds = r.Thresholds
	return failed
}

// Write renders every output of the run directory: summary.json,
// summary.txt, one .hgrm spectrum per histogram and report.html.
func (r *Report) Write() error {
	if err := writeJSON(filepath.Join(r.Dir, SummaryFile), r.Summary); err != nil {
		return err
	}
	var txt strings.Builder
	if err := r.WriteText(&txt); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.Dir, TextFile), []byte(txt.String()), 0o644); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	for _, t := range r.Totals.Tagged() {
		scale, unit := 1e6, "milliseconds (recorded in nanoseconds, divided by 1000000)"
		if t.Tag == TagAttempts {
			scale, unit = 1, "lock acquire attempts per acquire (a count, not a time)"
		}
		if err := writeHgrm(filepath.Join(r.Dir, t.Tag+".hgrm"), t.Hist, scale, unit); err != nil {
			return err
		}
	}
	return writeHTML(filepath.Join(r.Dir, HTMLFile), r.htmlData())
}

// spectrum is the percentile distribution of h for the log-axis chart.
func spectrum(h *hdr.Histogram, scale float64) []specPoint {
	var out []specPoint
	for _, s := range percentileDistribution(h, hgrmTicksPerHalf) {
		out = append(out, specPoint{P: s.Level, V: math.Round(float64(s.Value)/scale*1000) / 1000})
	}
	return out
}

type specPoint struct {
	P float64 `json:"p"` // percentile, 0–100
	V float64 `json:"v"` // ms
}

package loadgen

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
)

// Merge combines the run directories of several load machines (each started
// with --worker i/M, or simply run side by side) into out, as one run:
// interval histograms are merged per interval of wall-clock time, counters
// and safety counts are summed, fault phases concatenated. The merged
// directory renders and is judged like any other, on the merged histograms;
// thresholds are recorded in its run.json for `redlab report`.
func Merge(dirs []string, out string, thresholds []Threshold) error {
	if len(dirs) == 0 {
		return errors.New("loadgen: merge needs at least one run directory")
	}
	metas := make([]Meta, len(dirs))
	for i, d := range dirs {
		m, err := readMeta(d)
		if err != nil {
			return err
		}
		if m.Started.IsZero() {
			return fmt.Errorf("loadgen: %s: the run never started", d)
		}
		if i > 0 && m.Interval() != metas[0].Interval() {
			return fmt.Errorf("loadgen: %s collects every %v, %s every %v: cannot merge", d, m.Interval(), dirs[0], metas[0].Interval())
		}
		metas[i] = m
	}
	meta := mergeMeta(metas, dirs)
	meta.Thresholds = nil
	for _, t := range thresholds {
		meta.Thresholds = append(meta.Thresholds, t.Expr)
	}
	w, err := CreateRun(out, meta)
	if err != nil {
		return err
	}
	defer w.Close()
	base := meta.Started
	interval := meta.Interval()

	if err := mergeHlogs(dirs, w, base, interval, len(meta.Nodes)); err != nil {
		return err
	}
	if err := mergeIntervals(dirs, w, base, interval); err != nil {
		return err
	}
	var safety Safety
	for _, d := range dirs {
		s, err := readSafety(d)
		if err != nil {
			return err
		}
		safety.Add(s)
	}
	if err := mergeFaults(dirs, filepath.Join(out, FaultsFile)); err != nil {
		return err
	}
	w.meta = meta
	return errors.Join(w.Close(), w.writeMeta(), writeJSON(filepath.Join(out, SafetyFile), safety))
}

func mergeMeta(metas []Meta, dirs []string) Meta {
	m := metas[0]
	m.Sources = append([]string(nil), dirs...)
	m.Planned, m.Scheduled, m.Refused, m.Stopped, m.CPUSeconds, m.Processes = 0, 0, 0, false, 0, nil
	m.Replicas = 0
	var workers []string
	for _, x := range metas {
		if x.Started.Before(m.Started) {
			m.Started = x.Started
		}
		if x.Ended.After(m.Ended) {
			m.Ended = x.Ended
		}
		m.Planned += x.Planned
		m.Scheduled += x.Scheduled
		m.Refused += x.Refused
		m.CPUSeconds += x.CPUSeconds
		m.Processes = append(m.Processes, x.Processes...)
		m.Stopped = m.Stopped || x.Stopped
		m.Replicas += x.Replicas
		if len(x.Nodes) > len(m.Nodes) {
			m.Nodes = x.Nodes
		}
		workers = append(workers, x.Worker)
	}
	m.Worker = strings.Join(workers, ",")
	m.Command = "merge " + strings.Join(dirs, " ")
	return m
}

// mergeHlogs streams every log once, interval by interval, holding one
// merged HistSet at a time.
func mergeHlogs(dirs []string, w *Writer, base time.Time, interval time.Duration, nodes int) error {
	readers := make([]*hlogReader, len(dirs))
	for i, d := range dirs {
		f, err := os.Open(filepath.Join(d, HlogFile))
		if err != nil {
			return fmt.Errorf("loadgen: %w", err)
		}
		defer f.Close()
		readers[i] = newHlogReader(bufio.NewReaderSize(f, 1<<16))
	}
	baseMs := base.UnixMilli()
	set := NewHistSet(nodes)
	iv := &Interval{Hists: set}
	for idx := 0; ; idx++ {
		found, more := false, false
		startMs := bucketStartMs(idx, baseMs, interval)
		endMs := startMs
		for _, r := range readers {
			for {
				e, err := r.Peek()
				if err != nil {
					return err
				}
				if e == nil {
					break
				}
				if intervalIndex(e.StartMs, baseMs, interval) > idx {
					more = true
					break
				}
				r.Next()
				found = true
				endMs = max(endMs, movedEndMs(e.StartMs, e.EndMs, startMs))
				dst := set.ByTag(e.Tag)
				if dst == nil {
					if n, ok := nodeIndex(e.Tag); ok {
						set.growNodes(n + 1)
						dst = set.Nodes[n]
					}
				}
				if dst != nil {
					mergeHist(dst, e.Hist)
				}
			}
		}
		if found {
			iv.Index = idx
			iv.Start = time.UnixMilli(startMs)
			iv.End = time.UnixMilli(endMs)
			if err := w.hlogInterval(iv); err != nil {
				return err
			}
			set.Reset()
		}
		if !more {
			return nil
		}
	}
}

// bucketStartMs is the start of interval idx of the merged run.
func bucketStartMs(idx int, baseMs int64, interval time.Duration) int64 {
	return baseMs + int64(idx)*interval.Milliseconds()
}

// movedEndMs is the end of a source interval [startMs, endMs) once it is
// moved to the merged interval starting at toMs. A run that started a
// fraction of an interval apart from the merged base has its intervals moved
// up to half an interval either way; keeping their own ends would let a
// short interval moved forward (a run's final one) end before it starts,
// and a log line of negative length is skipped by HdrHistogram log readers,
// hdrhistogram-go's among them, with its samples.
func movedEndMs(startMs, endMs, toMs int64) int64 {
	return toMs + max(endMs-startMs, 0)
}

// hlogInterval writes only the histograms of an interval (merge writes the
// counters separately).
func (w *Writer) hlogInterval(iv *Interval) error {
	if w.hlog == nil {
		start := iv.Start.Add(-time.Duration(iv.Index) * w.meta.Interval())
		var err error
		if w.hlog, err = createHlog(filepath.Join(w.dir, HlogFile), start, w.meta.Command); err != nil {
			return err
		}
	}
	return w.hlog.write(iv.Hists, iv.Start, iv.End)
}

func mergeIntervals(dirs []string, w *Writer, base time.Time, interval time.Duration) error {
	merged := map[int]*IntervalRecord{}
	baseMs := base.UnixMilli()
	for _, d := range dirs {
		err := readIntervals(d, func(rec IntervalRecord) error {
			idx := intervalIndex(rec.StartMs, baseMs, interval)
			m := merged[idx]
			if m == nil {
				start := bucketStartMs(idx, baseMs, interval)
				m = &IntervalRecord{Index: idx, StartMs: start, EndMs: start, Outcomes: map[string]int64{}}
				merged[idx] = m
			}
			m.EndMs = max(m.EndMs, movedEndMs(rec.StartMs, rec.EndMs, m.StartMs))
			m.TargetRate += rec.TargetRate
			m.Scheduled += rec.Scheduled
			m.InFlight += rec.InFlight
			m.LateStarts += rec.LateStarts
			m.DoubleGrants += rec.DoubleGrants
			m.Clamped += rec.Clamped
			m.VersionConflicts += rec.VersionConflicts
			for k, v := range rec.Outcomes {
				m.Outcomes[k] += v
			}
			for len(m.NodeOutcomes) < len(rec.NodeOutcomes) {
				m.NodeOutcomes = append(m.NodeOutcomes, map[string]int64{})
			}
			for i, no := range rec.NodeOutcomes {
				for k, v := range no {
					m.NodeOutcomes[i][k] += v
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	idxs := make([]int, 0, len(merged))
	for i := range merged {
		idxs = append(idxs, i)
	}
	sort.Ints(idxs)
	for _, i := range idxs {
		if err := w.enc.Encode(merged[i]); err != nil {
			return fmt.Errorf("loadgen: write %s: %w", IntervalsFile, err)
		}
	}
	return w.ivw.Flush()
}

// mergeFaults writes the union of the runs' fault logs to out: runs side by
// side against one lab each hold a copy of its faults.jsonl, taken at
// different moments, so a fault appears in several, ended in the later ones.
func mergeFaults(dirs []string, out string) error {
	byID := map[string]int{}
	var faults []faultlog.Fault
	for _, d := range dirs {
		fs, err := faultlog.Read(filepath.Join(d, FaultsFile))
		if err != nil {
			return fmt.Errorf("loadgen: %w", err)
		}
		for _, f := range fs {
			i, seen := byID[f.ID]
			switch {
			case !seen:
				byID[f.ID] = len(faults)
				faults = append(faults, f)
			case faults[i].Active() && !f.Active():
				faults[i] = f
			}
		}
	}
	sort.SliceStable(faults, func(i, j int) bool { return faults[i].Start.Before(faults[j].Start) })
	var evs []faultlog.Event
	for _, f := range faults {
		evs = append(evs, f.Events()...)
	}
	if err := faultlog.Append(out, evs...); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	return nil
}

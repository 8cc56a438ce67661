package loadgen

import (
	"path/filepath"
	"testing"
	"time"
)

// ivSpan is one interval of a synthetic run: its offsets from the run's start
// and the operations that ended in it.
type ivSpan struct {
	from, to time.Duration
	ops      int
}

// writeSpans records a run that started at start, one interval per span,
// each operation with a 1 ms e2e and acquire latency.
func writeSpans(t *testing.T, dir string, start time.Time, interval time.Duration, spans ...ivSpan) {
	t.Helper()
	w, err := CreateRun(dir, Meta{Command: "load", IntervalMs: interval.Milliseconds()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	set := NewHistSet(0)
	for i, s := range spans {
		set.Reset()
		for range s.ops {
			set.add(Sample{Outcome: Reserved, E2E: time.Millisecond, E2EUncorrected: time.Millisecond, Lock: true, Acquire: time.Millisecond})
		}
		iv := &Interval{Index: i, Start: start.Add(s.from), End: start.Add(s.to), Hists: set, Final: i == len(spans)-1}
		if err := w.Interval(iv); err != nil {
			t.Fatal(err)
		}
	}
	last := spans[len(spans)-1]
	if err := w.Finish(Info{Start: start, End: start.Add(last.to)}, Safety{}); err != nil {
		t.Fatal(err)
	}
}

// A run merged with one that started earlier by a fraction of an interval
// has its intervals moved to the nearest interval of the merged run. A
// short final interval moved forward ends, as logged, before the start it
// is moved to; its histograms must still be read back.
func TestMergeKeepsShortFinalIntervalOfALaterRun(t *testing.T) {
	const interval = 100 * time.Millisecond
	t0 := time.UnixMilli(1_700_000_000_000)
	for _, offset := range []time.Duration{0, 30 * time.Millisecond, 60 * time.Millisecond, 360 * time.Millisecond, 99 * time.Millisecond} {
		t.Run(offset.String(), func(t *testing.T) {
			root := t.TempDir()
			a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
			writeSpans(t, a, t0, interval, ivSpan{0, 100 * time.Millisecond, 50}, ivSpan{100 * time.Millisecond, 200 * time.Millisecond, 50},
				ivSpan{200 * time.Millisecond, 203 * time.Millisecond, 2})
			writeSpans(t, b, t0.Add(offset), interval, ivSpan{0, 100 * time.Millisecond, 50}, ivSpan{100 * time.Millisecond, 200 * time.Millisecond, 50},
				ivSpan{200 * time.Millisecond, 203 * time.Millisecond, 2})
			out := filepath.Join(root, "merged")
			if err := Merge([]string{a, b}, out, nil); err != nil {
				t.Fatal(err)
			}
			r, err := LoadReport(out)
			if err != nil {
				t.Fatal(err)
			}
			s := r.Summary
			if s.Requests != 204 || s.E2ELatencyMs.Count != 204 || s.AcquireLatencyMs.Count != 204 {
				t.Errorf("got %d requests, %d e2e and %d acquire samples; want 204 each", s.Requests, s.E2ELatencyMs.Count, s.AcquireLatencyMs.Count)
			}
			err = readIntervals(out, func(rec IntervalRecord) error {
				if rec.EndMs < rec.StartMs {
					t.Errorf("intervals.jsonl: interval %d ends at %d, before its start %d", rec.Index, rec.EndMs, rec.StartMs)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

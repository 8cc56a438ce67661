package loadgen

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// HlogFile is the interval log of a run directory.
const HlogFile = "latency.hlog"

// hlogWriter appends every interval's histograms, one line per tag, to an
// HdrHistogram interval log (format 1.3, readable by HistogramLogProcessor,
// HistogramLogAnalyzer and hdrhistogram-go's HistogramLogReader). Timestamps
// are relative to a whole-second base time written in the header.
type hlogWriter struct {
	f  *os.File
	bw *bufio.Writer
	w  *hdr.HistogramLogWriter
}

func createHlog(path string, start time.Time, comment string) (*hlogWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	bw := bufio.NewWriter(f)
	w := hdr.NewHistogramLogWriter(bw)
	startMs := start.UnixMilli()
	// The reader parses whole seconds only, so the base is the second the
	// run started in and the interval timestamps carry the rest.
	base := startMs / 1000 * 1000
	w.SetBaseTime(base)
	for _, step := range []func() error{
		w.OutputLogFormatVersion,
		func() error { return w.OutputComment(strings.ReplaceAll(comment, "\n", " ")) },
		func() error {
			return w.OutputComment("values in nanoseconds except Tag=attempts (a count); Interval_Max in ms")
		},
		func() error { return w.OutputStartTime(startMs) },
		func() error { return w.OutputBaseTime(base) },
		w.OutputLegend,
	} {
		if err := step(); err != nil {
			f.Close()
			return nil, fmt.Errorf("loadgen: write %s: %w", path, err)
		}
	}
	return &hlogWriter{f: f, bw: bw, w: w}, nil
}

// write logs every histogram of one interval and flushes, so an aborted run
// keeps what it measured.
func (h *hlogWriter) write(set *HistSet, start, end time.Time) error {
	for _, t := range set.Tagged() {
		t.Hist.SetTag(t.Tag)
		t.Hist.SetStartTimeMs(start.UnixMilli())
		t.Hist.SetEndTimeMs(end.UnixMilli())
		if err := h.w.OutputIntervalHistogram(t.Hist); err != nil {
			return fmt.Errorf("loadgen: write %s: %w", HlogFile, err)
		}
	}
	if err := h.bw.Flush(); err != nil {
		return fmt.Errorf("loadgen: write %s: %w", HlogFile, err)
	}
	return nil
}

func (h *hlogWriter) close() error {
	if h == nil || h.f == nil {
		return nil
	}
	err := h.bw.Flush()
	if cerr := h.f.Close(); err == nil {
		err = cerr
	}
	h.f = nil
	if err != nil {
		return fmt.Errorf("loadgen: close %s: %w", HlogFile, err)
	}
	return nil
}

// hlogEntry is one interval histogram read back.
type hlogEntry struct {
	Tag     string
	StartMs int64 // absolute, ms since the epoch
	EndMs   int64
	Hist    *hdr.Histogram
}

// hlogReader reads an interval log with one entry of lookahead, for the
// streaming merge of several logs.
type hlogReader struct {
	r    *hdr.HistogramLogReader
	peek *hlogEntry
	err  error
	done bool
}

func newHlogReader(r io.Reader) *hlogReader {
	return &hlogReader{r: hdr.NewHistogramLogReader(r)}
}

// Peek returns the next entry without consuming it; nil at the end.
func (h *hlogReader) Peek() (*hlogEntry, error) {
	if h.peek != nil || h.done {
		return h.peek, h.err
	}
	hist, err := h.r.NextIntervalHistogram()
	if err != nil {
		h.done, h.err = true, fmt.Errorf("loadgen: read %s: %w", HlogFile, err)
		return nil, h.err
	}
	if hist == nil {
		h.done = true
		return nil, nil
	}
	h.peek = &hlogEntry{Tag: hist.Tag(), StartMs: hist.StartTimeMs(), EndMs: hist.EndTimeMs(), Hist: hist}
	return h.peek, nil
}

// Next consumes and returns the next entry; nil at the end.
func (h *hlogReader) Next() (*hlogEntry, error) {
	e, err := h.Peek()
	h.peek = nil
	return e, err
}

// intervalIndex maps an absolute interval start to its index in a run that
// started at baseMs; rounding absorbs the log's float timestamps.
func intervalIndex(startMs, baseMs int64, interval time.Duration) int {
	ms := float64(interval.Milliseconds())
	if ms <= 0 {
		ms = 1000
	}
	return int(math.Round(float64(startMs-baseMs) / ms))
}

// readHlogFile calls fn for every entry of a run directory's interval log.
func readHlogFile(dir string, fn func(*hlogEntry) error) error {
	f, err := os.Open(filepath.Join(dir, HlogFile))
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	defer f.Close()
	r := newHlogReader(bufio.NewReaderSize(f, 1<<16))
	for {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil {
			return nil
		}
		if err := fn(e); err != nil {
			return err
		}
	}
}

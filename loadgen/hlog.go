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
// HdrHistogram interval log in the format of Java's HistogramLogWriter
// (format 1.3, readable by HistogramLogProcessor, HistogramLogAnalyzer,
// hdr-histogram-js and hdrhistogram-go's HistogramLogReader). Interval
// timestamps are seconds from the run's start, which the header gives to
// the millisecond as both StartTime and BaseTime.
type hlogWriter struct {
	f      *os.File
	bw     *bufio.Writer
	baseMs int64
}

// hlogUnits is the header comment that says what the numbers are.
// Interval_Max is the interval's maximum divided by hlogMaxRatio(tag).
const hlogUnits = "[Values in nanoseconds; Tag=attempts counts lock acquire attempts. " +
	"Interval_Max in milliseconds; for Tag=attempts, in attempts.]"

func hlogMaxRatio(tag string) float64 {
	if tag == TagAttempts {
		return 1
	}
	return 1e6
}

// oneLine keeps the command on its comment line.
var oneLine = strings.NewReplacer("\r", " ", "\n", " ")

// createHlog starts the interval log of a run that started at start;
// command is the redlab command line without "redlab", for the header.
func createHlog(path string, start time.Time, command string) (*hlogWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	startMs := start.UnixMilli()
	secs := formatFixed(float64(startMs)/1000, 3)
	bw := bufio.NewWriter(f)
	fmt.Fprintf(bw, "#[Histogram log format version 1.3]\n")
	fmt.Fprintf(bw, "#%s\n", oneLine.Replace(strings.TrimSpace("redlab "+command)))
	fmt.Fprintf(bw, "#%s\n", hlogUnits)
	// Java writes Date.toString(); this is its layout, in UTC.
	fmt.Fprintf(bw, "#[StartTime: %s (seconds since epoch), %s]\n", secs, time.UnixMilli(startMs).UTC().Format("Mon Jan 02 15:04:05 MST 2006"))
	fmt.Fprintf(bw, "#[BaseTime: %s (seconds since epoch)]\n", secs)
	fmt.Fprintf(bw, "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n")
	if err := bw.Flush(); err != nil {
		f.Close()
		return nil, fmt.Errorf("loadgen: write %s: %w", path, err)
	}
	return &hlogWriter{f: f, bw: bw, baseMs: startMs}, nil
}

// write logs every histogram of one interval and flushes, so an aborted run
// keeps what it measured. An interval that ends before it starts (the wall
// clock stepped back) is logged with length 0: readers skip a line of
// negative length, samples and all.
func (h *hlogWriter) write(set *HistSet, start, end time.Time) error {
	from := formatFixed(float64(start.UnixMilli()-h.baseMs)/1000, 3)
	length := formatFixed(float64(max(end.UnixMilli()-start.UnixMilli(), 0))/1000, 3)
	for _, t := range set.Tagged() {
		payload, err := t.Hist.EncodeV2()
		if err != nil {
			return fmt.Errorf("loadgen: write %s: encode %s: %w", HlogFile, t.Tag, err)
		}
		maxV := formatFixed(float64(histMax(t.Hist))/hlogMaxRatio(t.Tag), 3)
		fmt.Fprintf(h.bw, "Tag=%s,%s,%s,%s,%s\n", t.Tag, from, length, maxV, payload)
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

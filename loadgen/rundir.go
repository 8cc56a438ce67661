package loadgen

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/inventory"
)

// Files of a run directory. run.json, intervals.jsonl, latency.hlog and
// safety.json are the raw record written during the run; everything else is
// rendered from them (and faults.jsonl, written by the fault injector, when
// present), so `redlab report DIR` and `redlab merge` rebuild it exactly.
const (
	MetaFile      = "run.json"
	IntervalsFile = "intervals.jsonl"
	SafetyFile    = "safety.json"
	FaultsFile    = faultlog.FileName
	SummaryFile   = "summary.json"
	TextFile      = "summary.txt"
	HTMLFile      = "report.html"
	SweepFile     = "sweep.json"
)

// Meta describes a run: how it was configured and how it went.
type Meta struct {
	Version     int      `json:"version"`
	Command     string   `json:"command,omitempty"`
	Target      string   `json:"target"` // inventory, http, noop
	Guard       string   `json:"guard,omitempty"`
	Nodes       []string `json:"nodes,omitempty"`
	Etcd        []string `json:"etcd,omitempty"`
	URLs        []string `json:"urls,omitempty"`
	Replicas    int      `json:"replicas,omitempty"`
	Stages      string   `json:"stages"` // the profile, as --stages would take it
	Keys        string   `json:"keys"`
	Quantity    string   `json:"quantity"`
	Stock       int64    `json:"stock,omitempty"`
	Store       string   `json:"store,omitempty"` // DSN without credentials
	LockTTLMs   float64  `json:"lock_ttl_ms,omitempty"`
	MaxInFlight int      `json:"max_in_flight"`
	LateTolMs   float64  `json:"late_tolerance_ms"`
	IntervalMs  int64    `json:"interval_ms"`
	Worker      string   `json:"worker"` // i/M
	Seed        uint64   `json:"seed"`
	// Thresholds are judged again when the report is re-rendered without
	// thresholds of its own.
	Thresholds []string `json:"thresholds,omitempty"`

	Started   time.Time `json:"started"`
	Ended     time.Time `json:"ended"`
	Planned   uint64    `json:"planned"`
	Scheduled uint64    `json:"scheduled"`
	Refused   int64     `json:"refused"`
	Stopped   bool      `json:"stopped,omitempty"`
	// CPUSeconds is the generator process's CPU time during the run (see
	// Info.CPU), summed over the runs of a merge.
	CPUSeconds float64 `json:"cpu_s,omitempty"`
	// Processes is the CPU time of the other processes the run watched
	// (Config.Watch), concatenated over the runs of a merge.
	Processes []ProcessCPU `json:"processes,omitempty"`
	// Sources lists the run directories a merged run was made from.
	Sources []string `json:"sources,omitempty"`
	// Drill is set on a guard's run in a drill: the drill's name and
	// verdict, which title the report (RecordDrill).
	Drill *DrillInfo `json:"drill,omitempty"`
}

// DrillInfo names the drill a run was one guard's load in, with the
// verdicts, in the drill's own words.
type DrillInfo struct {
	// Name is the drill's ("one-node-loss").
	Name string `json:"name"`
	// Verdict is the drill's: "PASS", "FAIL" or another word the drill
	// uses ("INVALID").
	Verdict string `json:"verdict"`
	// Guard is this guard's part of it, one line: "every expectation
	// held", or the expectations that did not.
	Guard string `json:"guard,omitempty"`
}

// Passed reports whether the drill's verdict is PASS.
func (d *DrillInfo) Passed() bool { return d != nil && d.Verdict == "PASS" }

// lockService says on what the run's guard takes its lock, as a report
// names it: the Redis lock nodes, the etcd members, or nothing. A guard
// this version does not know locks on the nodes the run lists; known is
// false when the run names neither a guard nor nodes (a no-op target).
func (m *Meta) lockService() (redis, etcd, known bool) {
	if g, err := inventory.ParseAnyGuard(m.Guard); err == nil {
		return g.Locks() && !g.NeedsEtcd(), g.NeedsEtcd(), true
	}
	return len(m.Nodes) > 0, len(m.Etcd) > 0, len(m.Nodes)+len(m.Etcd) > 0
}

// Interval returns the collection period.
func (m *Meta) Interval() time.Duration {
	if m.IntervalMs <= 0 {
		return DefaultInterval
	}
	return time.Duration(m.IntervalMs) * time.Millisecond
}

// IntervalRecord is one line of intervals.jsonl: the counters of an
// interval (its histograms are in latency.hlog under the same start time).
type IntervalRecord struct {
	Index        int              `json:"i"`
	StartMs      int64            `json:"start_ms"`
	EndMs        int64            `json:"end_ms"`
	TargetRate   float64          `json:"target_rate"`
	Scheduled    int64            `json:"scheduled"`
	InFlight     int64            `json:"in_flight"`
	Outcomes     map[string]int64 `json:"outcomes"`
	LateStarts   int64            `json:"late_starts"`
	DoubleGrants int64            `json:"double_grants"` // found in this interval
	Clamped      int64            `json:"clamped,omitempty"`
	// VersionConflicts: db-version's tries lost to a concurrent write.
	VersionConflicts int64              `json:"version_conflicts,omitempty"`
	NodeOutcomes     []map[string]int64 `json:"node_outcomes,omitempty"`
}

func newIntervalRecord(iv *Interval, prevDoubleGrants int64) IntervalRecord {
	h := iv.Hists
	rec := IntervalRecord{
		Index: iv.Index, StartMs: iv.Start.UnixMilli(), EndMs: iv.End.UnixMilli(),
		TargetRate: iv.TargetRate, Scheduled: iv.Scheduled, InFlight: iv.InFlight,
		Outcomes: make(map[string]int64, numOutcomes), LateStarts: h.LateStarts,
		DoubleGrants: iv.DoubleGrants - prevDoubleGrants, Clamped: h.Clamped, VersionConflicts: h.VersionConflicts,
	}
	for i, c := range h.Outcomes {
		rec.Outcomes[outcomeNames[i]] = c
	}
	for _, no := range h.NodeOutcomes {
		m := make(map[string]int64, numNodeOutcomes)
		for j, c := range no {
			m[nodeOutcomeNames[j]] = c
		}
		rec.NodeOutcomes = append(rec.NodeOutcomes, m)
	}
	return rec
}

// Writer records a run into its directory as it happens: run.json first,
// then every interval to latency.hlog and intervals.jsonl (flushed each
// time), and at the end the final run.json and safety.json.
type Writer struct {
	dir    string
	meta   Meta
	hlog   *hlogWriter
	ivf    *os.File
	ivw    *bufio.Writer
	enc    *json.Encoder
	prevDG int64
}

// PrepareDir readies dir for a new run (sweep false) or a new sweep: it is
// made if missing, and when it holds an earlier one of the same kind
// (MetaFile, SweepFile) it is removed first, with everything in it, as
// `redlab drill` replaces a drill's directory. A directory that holds the
// other kind is refused, and one that holds neither is kept as it is.
func PrepareDir(dir string, sweep bool) error {
	own, other, otherName := MetaFile, SweepFile, "a sweep"
	if sweep {
		own, other, otherName = SweepFile, MetaFile, "a run"
	}
	if _, err := os.Stat(filepath.Join(dir, other)); err == nil {
		return fmt.Errorf("loadgen: %s holds %s (%s), which this would not replace: choose another --out", dir, otherName, other)
	}
	if _, err := os.Stat(filepath.Join(dir, own)); err == nil {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("loadgen: replace the earlier run in %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	return nil
}

// CreateRun makes dir (which must not hold a run already: PrepareDir
// clears one) and starts its
// record. The interval log is opened with the first interval, when the start
// time is known.
func CreateRun(dir string, meta Meta) (*Writer, error) {
	if _, err := os.Stat(filepath.Join(dir, MetaFile)); err == nil {
		return nil, fmt.Errorf("loadgen: %s already holds a run; choose a new --out", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	meta.Version = 1
	w := &Writer{dir: dir, meta: meta}
	if err := w.writeMeta(); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, IntervalsFile))
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	w.ivf, w.ivw = f, bufio.NewWriter(f)
	w.enc = json.NewEncoder(w.ivw)
	return w, nil
}

// Dir is the run directory.
func (w *Writer) Dir() string { return w.dir }

// Interval is an IntervalSink.
func (w *Writer) Interval(iv *Interval) error {
	if w.hlog == nil {
		start := iv.Start.Add(-time.Duration(iv.Index) * w.meta.Interval())
		w.meta.Started = start
		if err := w.writeMeta(); err != nil {
			return err
		}
		var err error
		if w.hlog, err = createHlog(filepath.Join(w.dir, HlogFile), start, w.meta.Command); err != nil {
			return err
		}
	}
	if err := w.hlog.write(iv.Hists, iv.Start, iv.End); err != nil {
		return err
	}
	rec := newIntervalRecord(iv, w.prevDG)
	w.prevDG = iv.DoubleGrants
	if err := w.enc.Encode(rec); err != nil {
		return fmt.Errorf("loadgen: write %s: %w", IntervalsFile, err)
	}
	if err := w.ivw.Flush(); err != nil {
		return fmt.Errorf("loadgen: write %s: %w", IntervalsFile, err)
	}
	return nil
}

// Finish writes the final run.json and safety.json and closes the files.
func (w *Writer) Finish(info Info, safety Safety) error {
	w.meta.Started, w.meta.Ended = info.Start, info.End
	w.meta.Planned, w.meta.Scheduled, w.meta.Refused, w.meta.Stopped = info.Planned, info.Scheduled, info.Refused, info.Stopped
	w.meta.CPUSeconds = math.Round(info.CPU.Seconds()*1000) / 1000
	w.meta.Processes = info.Watched
	return errors.Join(w.Close(), w.writeMeta(), writeJSON(filepath.Join(w.dir, SafetyFile), safety))
}

// RecordSafety replaces the safety verdict of the finished run in dir with
// s, for a judge that saw more than the run did: a drill checks the holds of
// its history, which has the tenures of `redlab serve` processes too.
// Render the report again (LoadReport, Write) for it to show s.
func RecordSafety(dir string, s Safety) error {
	if _, err := readMeta(dir); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, SafetyFile), s); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	return nil
}

// RecordDrill writes the drill's name and verdicts into the finished run
// in dir (run.json), for a drill that judged the run after it ended.
// Render the report again (LoadReport, Write) for its title to show them.
func RecordDrill(dir string, d DrillInfo) error {
	m, err := readMeta(dir)
	if err != nil {
		return err
	}
	if d.Name == "" || d.Verdict == "" {
		return fmt.Errorf("loadgen: drill info for %s: want a name and a verdict, got %+v", dir, d)
	}
	m.Drill = &d
	if err := writeJSON(filepath.Join(dir, MetaFile), m); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	return nil
}

// Close closes the files without finishing the record (an aborted run).
func (w *Writer) Close() error {
	var errs []error
	errs = append(errs, w.hlog.close())
	if w.ivf != nil {
		errs = append(errs, w.ivw.Flush(), w.ivf.Close())
		w.ivf = nil
	}
	return errors.Join(errs...)
}

func (w *Writer) writeMeta() error { return writeJSON(filepath.Join(w.dir, MetaFile), w.meta) }

// writeJSON replaces a run directory's JSON file atomically: a report
// re-rendered while another process reads it is never seen half written.
func writeJSON(path string, v any) error { return atomicfile.WriteJSON(path, v, 0o644) }

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("loadgen: %s: %w", path, err)
	}
	return nil
}

// readMeta loads run.json.
func readMeta(dir string) (Meta, error) {
	var m Meta
	if err := readJSON(filepath.Join(dir, MetaFile), &m); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return m, fmt.Errorf("loadgen: %s is not a run directory (no %s)", dir, MetaFile)
		}
		return m, err
	}
	return m, nil
}

// readSafety loads safety.json; a run that never finished has none.
func readSafety(dir string) (Safety, error) {
	var s Safety
	err := readJSON(filepath.Join(dir, SafetyFile), &s)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	return s, err
}

// readIntervals calls fn for every record of intervals.jsonl.
func readIntervals(dir string, fn func(IntervalRecord) error) error {
	f, err := os.Open(filepath.Join(dir, IntervalsFile))
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReader(f))
	for dec.More() {
		var rec IntervalRecord
		if err := dec.Decode(&rec); err != nil {
			return fmt.Errorf("loadgen: %s: %w", IntervalsFile, err)
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	return nil
}

// Command capacitytable turns the runs of scripts/capacity.sh into one
// markdown table: per setup the knee of its sweep (the highest rate that met
// the SLO), acquire latency and the CPU of every process per reservation at
// the knee, and goodput at the knee and at three times it; then the lab
// fronts' cost against the direct path, per fsync policy.
//
//	go run ./loadgen/internal/capacitytable [-floor FILE] [-readme README.md] [-note TEXT] PATH:FSYNC=DIR ...
//
// PATH is fronts or direct; DIR holds the setup's sweep in DIR/sweep and,
// when the sweep found a knee, the run at three times it in DIR/over and
// the spike in DIR/spike: a few seconds at three times the knee, then half
// the knee, for the time acquire p99 takes to be back under 10 ms (with 99%
// of the operations reserved) for good. With -floor, the last three
// columns come from that floor.json (package floor): the disk's
// appends+fdatasyncs per second by one writer and by five, the fan-out
// floor of the setup's fsync policy, and the knee as a share of it; without,
// they are dashes. With -readme, the table replaces what lies between the
// file's capacity markers (BeginMarker, EndMarker); without, it is printed.
//
//	go run ./loadgen/internal/capacitytable -floor FILE -disk DIR [-duration 5s]
//	go run ./loadgen/internal/capacitytable -floor FILE -fanout ADDR,... -appendfsync POLICY [-duration 5s]
//
// measure the floor and record it in FILE: the disk under DIR (the lab's
// state directory), or the fan-out floor on the redis-servers at the
// addresses, which run with appendfsync POLICY, logged in as the redlock
// user of $REDLAB_CREDENTIALS when it is set.
//
//	go run ./loadgen/internal/capacitytable -floor FILE -client ADDR,... -setup PATH:FSYNC -rate R [-duration 5s]
//
// measures the bare client at the setup's knee R (package floor,
// MeasureClient), logged in as the redlock user of $REDLAB_CREDENTIALS, and
// records it in FILE: the table's generator ÷ client column reads the
// generator's CPU per reservation at the knee against it.
//
//	go run ./loadgen/internal/capacitytable -idle STATEDIR -out FILE [-duration 10s]
//
// samples the CPU of the lab's processes with no load (idle.json), the
// baseline of the cost table.
//
//	go run ./loadgen/internal/capacitytable -knee SWEEPDIR
//
// prints the knee of one sweep (0 when no step met the SLO), for the script
// to size the run at three times it.
//
//	go run ./loadgen/internal/capacitytable -cost [-readme FILE] [-note TEXT] GUARD=DIR ...
//
// is scripts/cost.sh's table, the price of each guard: latency and CPU per
// reservation at one common rate (DIR/common), the knee of its sweep
// (DIR/sweep) and goodput at three times it (DIR/over); with -readme it
// replaces what lies between the file's cost markers.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/loadgen"
	"github.com/redlocklab/redlocklab/loadgen/internal/floor"
)

// The SLO a spike's recovery is judged by, the sweep's.
const (
	recoveryP99      = 10 * time.Millisecond
	recoveryReserved = 0.99
)

// The markers around the table in the README.
const (
	BeginMarker = "<!-- capacity:begin -->"
	EndMarker   = "<!-- capacity:end -->"
)

func main() {
	readme := flag.String("readme", "", "write the table between the capacity markers of this file instead of printing it")
	note := flag.String("note", "", "a line printed under the table (how it was measured)")
	kneeOf := flag.String("knee", "", "print the knee of the sweep in this directory, and nothing else")
	cost := flag.Bool("cost", false, "the arguments are GUARD=DIR runs of scripts/cost.sh: print the price of each guard (with -readme, between the cost markers of that file)")
	floorPath := flag.String("floor", "", "the floor file (floor.json): -disk and -fanout record into it, the table reads its columns from it")
	disk := flag.String("disk", "", "measure appends+fdatasyncs per second in this directory, by one writer and by five, into -floor")
	fanout := flag.String("fanout", "", "measure the fan-out floor on these comma-separated redis-server addresses, into -floor under -appendfsync")
	appendfsync := flag.String("appendfsync", "", "with -fanout: the appendfsync policy the nodes run with")
	client := flag.String("client", "", "measure the bare client on these comma-separated redis-server addresses at -rate, into -floor under -setup")
	setup := flag.String("setup", "", "with -client: the setup (PATH:FSYNC) it is measured for")
	clientRate := flag.Float64("rate", 0, "with -client: the offered rate (the setup's knee)")
	compact := flag.String("compact-aof", "", "rewrite the AOF of the redis-servers at these comma-separated addresses (as the admin user of $REDLAB_CREDENTIALS) and wait for the rewrites, before a measurement")
	idle := flag.String("idle", "", "sample the CPU of the processes of the lab in this state directory with no load, into -out")
	out := flag.String("out", "", "with -idle: the file to write (idle.json)")
	duration := flag.Duration("duration", 5*time.Second, "with -disk, -fanout, -client or -idle: how long each measurement runs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case (*disk != "" || *fanout != "" || *client != "") && *floorPath == "":
		err = errors.New("-disk, -fanout and -client need -floor, the file to record into")
	case *idle != "" && *out == "":
		err = errors.New("-idle needs -out, the file to write")
	case *compact != "":
		err = runCompact(ctx, *compact)
	case *idle != "":
		err = runIdle(ctx, *idle, *out, *duration, os.Stdout)
	case *client != "":
		err = runClient(ctx, *floorPath, *client, *setup, *clientRate, *duration, os.Stdout)
	case *disk != "" && *fanout != "":
		err = errors.New("-disk and -fanout are separate runs: give one")
	case *disk != "":
		err = runDisk(ctx, *floorPath, *disk, *duration, os.Stdout)
	case *fanout != "":
		err = runFanout(ctx, *floorPath, *fanout, *appendfsync, *duration, os.Stdout)
	case *cost:
		err = runCost(flag.Args(), *readme, *note, os.Stdout)
	case *kneeOf != "":
		var sw *loadgen.Sweep
		if sw, err = loadgen.LoadSweep(*kneeOf); err == nil {
			fmt.Println(strconv.FormatFloat(sw.Knee, 'f', -1, 64))
		}
	default:
		err = run(flag.Args(), *floorPath, *readme, *note, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "capacitytable:", err)
		os.Exit(1)
	}
}

func run(args []string, floorPath, readme, note string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("no setups: give PATH:FSYNC=DIR, e.g. fronts:always=runs/capacity/fronts-always")
	}
	var rows []row
	for _, a := range args {
		r, err := load(a)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	fl := &floor.File{}
	if floorPath != "" {
		var err error
		if fl, err = floor.Read(floorPath); err != nil {
			return err
		}
	}
	var b bytes.Buffer
	render(&b, rows, fl, note)
	if readme == "" {
		_, err := stdout.Write(b.Bytes())
		return err
	}
	old, err := os.ReadFile(readme)
	if err != nil {
		return err
	}
	updated, err := replaceBetween(old, b.Bytes())
	if err != nil {
		return fmt.Errorf("%s: %w", readme, err)
	}
	return os.WriteFile(readme, updated, 0o644)
}

// row is one setup's figures.
type row struct {
	path, fsync string
	knee        float64 // 0: no step met the SLO
	kneeAtTop   bool    // every rate of the sweep met the SLO: the knee is at least knee
	// At the knee.
	acquireP50, acquireP99 float64 // ms
	cpuPerReserved         float64 // ms, every process; 0: not measured
	genCPUPerReserved      float64 // ms, the load generator alone
	goodput                float64 // reservations per second
	// At three times the knee; overRate 0 when not run.
	overRate, overGoodput float64
	// The spike: spikeFor at spikeRate, then calmRate; spikeRate 0 when
	// not run. recovered is false when the run ended outside the SLO.
	spikeRate, calmRate float64
	spikeFor, recovery  time.Duration
	recovered           bool
	// steps are the sweep's steps that met the SLO, by rate, for
	// comparing two setups at a rate both met.
	steps map[float64]stepFigures
}

// stepFigures are one sweep step's figures that the comparison reads.
type stepFigures struct {
	acquireP50, cpuPerReserved float64
}

func load(arg string) (row, error) {
	spec, dir, ok := strings.Cut(arg, "=")
	path, fsync, ok2 := strings.Cut(spec, ":")
	if !ok || !ok2 || (path != "fronts" && path != "direct") || fsync == "" || dir == "" {
		return row{}, fmt.Errorf("setup %q: want PATH:FSYNC=DIR with PATH fronts or direct", arg)
	}
	r := row{path: path, fsync: fsync}
	sweepDir := filepath.Join(dir, "sweep")
	sw, err := loadgen.LoadSweep(sweepDir)
	if err != nil {
		return row{}, fmt.Errorf("setup %s: %w", spec, err)
	}
	r.knee = sw.Knee
	if r.knee == 0 {
		return r, nil
	}
	r.kneeAtTop = !sw.Stopped // until a step above the knee says otherwise
	r.steps = map[float64]stepFigures{}
	for _, st := range sw.Steps {
		if st.Rate > sw.Knee {
			r.kneeAtTop = false
			continue
		}
		rep, err := loadgen.LoadReport(filepath.Join(sweepDir, st.Dir))
		if err != nil {
			return row{}, fmt.Errorf("setup %s: %w", spec, err)
		}
		s := rep.Summary
		r.steps[st.Rate] = stepFigures{acquireP50: s.AcquireLatencyMs.P50, cpuPerReserved: s.CPUMsPerReserved}
		if st.Rate != sw.Knee {
			continue
		}
		r.acquireP50, r.acquireP99 = s.AcquireLatencyMs.P50, s.AcquireLatencyMs.P99
		r.cpuPerReserved, r.goodput = s.CPUMsPerReserved, goodput(s)
		if n := s.Outcomes[loadgen.Reserved.String()]; n > 0 {
			r.genCPUPerReserved = s.GeneratorCPUS * 1000 / float64(n)
		}
	}
	if err := loadSpike(&r, filepath.Join(dir, "spike")); err != nil {
		return row{}, fmt.Errorf("setup %s: %w", spec, err)
	}
	overDir := filepath.Join(dir, "over")
	if _, err := os.Stat(overDir); err != nil {
		return r, nil
	}
	rep, err := loadgen.LoadReport(overDir)
	if err != nil {
		return row{}, fmt.Errorf("setup %s: %w", spec, err)
	}
	r.overRate, r.overGoodput = rep.Summary.TargetRatePerS, goodput(rep.Summary)
	return r, nil
}

// loadSpike reads the spike run in dir, if there is one: its stages go up
// to the spike's rate, stay there, and drop to the calm rate; the recovery
// is counted from the drop.
func loadSpike(r *row, dir string) error {
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	rep, err := loadgen.LoadReport(dir)
	if err != nil {
		return err
	}
	st, err := loadgen.ParseStages(rep.Meta.Stages)
	if err != nil {
		return fmt.Errorf("spike run %s: %w", dir, err)
	}
	var at time.Duration
	for i, x := range st {
		if i > 0 && x.Rate < st[i-1].Rate {
			r.spikeRate, r.calmRate, r.spikeFor = st[i-1].Rate, x.Rate, at
			break
		}
		at += x.Duration
	}
	if r.spikeRate == 0 {
		return fmt.Errorf("spike run %s: its stages %q never drop from the spike", dir, rep.Meta.Stages)
	}
	r.recovery, r.recovered = rep.Recovery(r.spikeFor, recoveryP99, recoveryReserved)
	return nil
}

// goodput is the reservations made per second of the run.
func goodput(s loadgen.Summary) float64 {
	if s.DurationS <= 0 {
		return 0
	}
	return float64(s.Outcomes[loadgen.Reserved.String()]) / s.DurationS
}

// kneeText is the knee as the table prints it: "≥ N" when every rate of
// the sweep met the SLO, so N is only a lower bound.
func (r row) kneeText() string {
	if r.kneeAtTop {
		return fmt.Sprintf("≥ %.0f", r.knee)
	}
	return fmt.Sprintf("%.0f", r.knee)
}

var pathNames = map[string]string{"fronts": "lab fronts", "direct": "direct to redis-server"}

func render(w io.Writer, rows []row, fl *floor.File, note string) {
	fmt.Fprintln(w, "| path | appendfsync | knee /s | acquire p50 ms | acquire p99 ms | CPU per reservation ms | of which the generator ms | generator ÷ bare client | goodput at knee /s | goodput at 3× knee /s | share | back under the SLO after a spike | disk fsyncs/s, 1 / 5 writers | fan-out floor locks/s | knee of the floor |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		if r.knee == 0 {
			fmt.Fprintf(w, "| %s | %s | none met the SLO | | | | | | | | | |%s\n", pathNames[r.path], r.fsync, floorCells(fl, r))
			continue
		}
		spike := "not run"
		switch {
		case r.spikeRate > 0 && r.recovered:
			spike = fmt.Sprintf("%.0f s", r.recovery.Seconds())
		case r.spikeRate > 0:
			spike = "not by the run's end"
		}
		over, share := "not run", ""
		if r.overRate > 0 {
			over = fmt.Sprintf("%.0f (at %.0f)", r.overGoodput, r.overRate)
			if r.goodput > 0 {
				share = fmt.Sprintf("%.0f%%", r.overGoodput/r.goodput*100)
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.2f | %.2f | %s | %s | %s | %.0f | %s | %s | %s |%s\n",
			pathNames[r.path], r.fsync, r.kneeText(), r.acquireP50, r.acquireP99, orDash(r.cpuPerReserved, "%.2f"),
			orDash(r.genCPUPerReserved, "%.2f"), clientCell(fl, r), r.goodput, over, share, spike, floorCells(fl, r))
	}
	for _, r := range rows {
		if r.kneeAtTop {
			fmt.Fprintln(w, "\n≥: every rate of that sweep met the SLO, so its knee lies at or above the sweep's top rate (raise CAPACITY_MAX_RATE to find it).")
			break
		}
	}
	// How the spikes were run, from the first one (the script runs them
	// alike).
	for _, r := range rows {
		if r.spikeRate > 0 {
			fmt.Fprintf(w, "\nSpike: %.0f s at three times the knee, then half the knee; \"back\" is the time from the drop until every later one-second interval has acquire p99 under %v and %.0f%% of its operations reserved.\n",
				r.spikeFor.Seconds(), recoveryP99, recoveryReserved*100)
			break
		}
	}
	// The fronts' cost: each fsync policy's fronts row against its direct
	// row, where both found a knee.
	var lines []string
	for _, f := range rows {
		if f.path != "fronts" || f.knee == 0 {
			continue
		}
		for _, d := range rows {
			if d.path != "direct" || d.fsync != f.fsync || d.knee == 0 {
				continue
			}
			// Side by side at the highest rate both met: CPU per
			// reservation falls as the rate grows (the processes' fixed
			// costs are shared by more reservations), so each setup's
			// own knee would not compare like with like.
			at := min(f.knee, d.knee)
			fs, okf := f.steps[at]
			ds, okd := d.steps[at]
			if !okf || !okd {
				continue
			}
			cpu := "CPU per reservation not measured"
			if fs.cpuPerReserved > 0 && ds.cpuPerReserved > 0 {
				cpu = fmt.Sprintf("CPU per reservation %.2f× (%.2f vs %.2f ms)", fs.cpuPerReserved/ds.cpuPerReserved, fs.cpuPerReserved, ds.cpuPerReserved)
			}
			lines = append(lines, fmt.Sprintf("- appendfsync %s, lab fronts against direct at %.0f/s: %s, acquire p50 %+.2f ms; knee %.2f×.",
				f.fsync, at, cpu, fs.acquireP50-ds.acquireP50, f.knee/d.knee))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, strings.Join(lines, "\n"))
	}
	if n := clientNote(fl); n != "" {
		fmt.Fprintln(w)
		fmt.Fprintln(w, n)
	}
	if n := floorNote(fl); n != "" {
		fmt.Fprintln(w)
		fmt.Fprintln(w, n)
	}
	if note != "" {
		fmt.Fprintln(w)
		fmt.Fprintln(w, note)
	}
}

func orDash(v float64, format string) string {
	if v <= 0 {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

// replaceBetween puts table between the capacity markers of doc, in place
// of what was there.
func replaceBetween(doc, table []byte) ([]byte, error) {
	return replaceMarked(doc, table, BeginMarker, EndMarker)
}

// replaceMarked puts table between the markers begin and end of doc.
func replaceMarked(doc, table []byte, begin, end string) ([]byte, error) {
	b := bytes.Index(doc, []byte(begin))
	e := bytes.Index(doc, []byte(end))
	if b < 0 || e < 0 || e < b {
		return nil, fmt.Errorf("no %s … %s markers, in that order", begin, end)
	}
	var out bytes.Buffer
	out.Write(doc[:b+len(begin)])
	out.WriteString("\n")
	out.Write(bytes.TrimRight(table, "\n"))
	out.WriteString("\n")
	out.Write(doc[e:])
	return out.Bytes(), nil
}

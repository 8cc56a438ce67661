// Command benchtable turns the output of `go test -bench BenchmarkLock` (read
// from stdin) into a markdown comparison table: per scenario and
// implementation the median ns/op, allocs/op, acquire p50/p99 and
// lock+unlock p99 over all runs (-count), with ratios against the
// single-node floor, redsync's defaults and redsync WithFailFast(true),
// followed by the headline ratios. BenchmarkInterleaved lines make a second
// table: per scenario the median lock+unlock p50 and p99 of this package,
// redsync WithFailFast(true) and the quorum fan-out floor, taking turns
// iteration by iteration, with the medians of this package's ratios to the
// other two over the rounds. BenchmarkClosedLoop lines make a third table: per workload and implementation the median locks/s and
// lock+unlock p50/p99 over all runs, the failed cycles of all runs
// together, and ratios against redsync's defaults.
//
//	go test -run '^$' -bench . -benchmem ./internal/redlocklab/ | go run ./internal/redlocklab/benchtable
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	rows, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no BenchmarkLock, BenchmarkInterleaved or BenchmarkClosedLoop results on stdin")
		os.Exit(1)
	}
	render(os.Stdout, rows)
}

// The benchmarks read: BenchmarkLock's and BenchmarkClosedLoop's
// sub-benchmarks are scenario/impl rows; BenchmarkInterleaved's are
// scenarios, each line carrying every implementation's metrics
// ("redlock-p50-ns", …), and make a row with an empty impl.
const (
	lockName        = "BenchmarkLock"
	closedName      = "BenchmarkClosedLoop"
	interleavedName = "BenchmarkInterleaved"
)

// interleavedImpls are the implementations BenchmarkInterleaved reports,
// by the prefix of their metrics, and how the table names them.
var interleavedImpls = []struct{ prefix, label string }{
	{"redlock", "redlock"},
	{"failfast", "redsync-failfast"},
	{"floor", "quorum fan-out floor"},
}

// row is one benchmark (scenario/impl), its metrics the medians over runs.
type row struct {
	bench          string // lockName or closedName
	scenario, impl string
	runs           int
	metrics        map[string]float64 // unit -> median
	sums           map[string]float64 // unit -> sum over runs
}

// parse reads benchmark lines such as
//
//	BenchmarkLock/healthy/redlock-2  2000  123 ns/op  45 p50-ns  67 p99-ns  9 B/op  3 allocs/op
func parse(r io.Reader) ([]row, error) {
	samples := map[string]map[string][]float64{}
	var order []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !slices.ContainsFunc([]string{lockName, closedName, interleavedName}, func(b string) bool { return strings.HasPrefix(f[0], b+"/") }) {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i] // the -GOMAXPROCS suffix
			}
		}
		if _, ok := samples[name]; !ok {
			samples[name] = map[string][]float64{}
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: value %q: %w", f[0], f[i], err)
			}
			samples[name][f[i+1]] = append(samples[name][f[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var rows []row
	for _, name := range order {
		bench, sub, _ := strings.Cut(name, "/")
		parts := strings.Split(sub, "/")
		if bench == interleavedName {
			parts = append(parts, "")
		}
		if len(parts) != 2 {
			continue
		}
		r := row{bench: bench, scenario: parts[0], impl: parts[1], metrics: map[string]float64{}, sums: map[string]float64{}}
		for unit, vs := range samples[name] {
			r.metrics[unit] = median(vs)
			r.runs = max(r.runs, len(vs))
			for _, v := range vs {
				r.sums[unit] += v
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// find returns BenchmarkLock's row scenario/impl.
func find(rows []row, scenario, impl string) (row, bool) {
	return findIn(rows, lockName, scenario, impl)
}

func findIn(rows []row, bench, scenario, impl string) (row, bool) {
	for _, r := range rows {
		if r.bench == bench && r.scenario == scenario && r.impl == impl {
			return r, true
		}
	}
	return row{}, false
}

// dur formats a duration in nanoseconds; "-" for a metric the run did not
// report.
func dur(ns float64) string {
	switch {
	case ns <= 0:
		return "-"
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.0f µs", ns/1e3)
	}
	return fmt.Sprintf("%.0f ns", ns)
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func render(w io.Writer, rows []row) {
	by := map[string][]row{}
	for _, r := range rows {
		by[r.bench] = append(by[r.bench], r)
	}
	first := true
	for _, t := range []struct {
		bench  string
		render func(io.Writer, []row)
	}{
		{lockName, renderLock},
		{interleavedName, renderInterleaved},
		{closedName, renderClosed},
	} {
		if len(by[t.bench]) == 0 {
			continue
		}
		if !first {
			fmt.Fprintln(w)
		}
		first = false
		t.render(w, by[t.bench])
	}
}

// renderInterleaved writes the interleaved table: one whole lock+unlock as
// a caller waits for it, with this package's ratios as medians of each
// round's own ratio (the rounds share the machine's moods, so a ratio
// within a round is steadier than a ratio of medians).
func renderInterleaved(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| scenario | implementation | rounds | lock+unlock p50 | lock+unlock p99 |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|")
	for _, r := range rows {
		for _, im := range interleavedImpls {
			fmt.Fprintf(w, "| %s | %s | %d | %s | %s |\n", r.scenario, im.label, r.runs,
				dur(r.metrics[im.prefix+"-p50-ns"]), dur(r.metrics[im.prefix+"-p99-ns"]))
		}
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		m := r.metrics
		fmt.Fprintf(w, "- %s, lock+unlock taking turns iteration by iteration (appendfsync no, median of %d rounds): p50 %.2f× redsync WithFailFast(true)'s and %.2f× the quorum fan-out floor's (%s against %s and %s); p99 %.2f× redsync WithFailFast(true)'s (%s vs %s)\n",
			r.scenario, r.runs, m["vs-failfast-p50"], m["vs-floor-p50"],
			dur(m["redlock-p50-ns"]), dur(m["failfast-p50-ns"]), dur(m["floor-p50-ns"]),
			m["vs-failfast-p99"], dur(m["redlock-p99-ns"]), dur(m["failfast-p99-ns"]))
	}
}

// renderClosed writes the closed-loop table: throughput and whole-cycle
// latency per workload, against redsync's defaults.
func renderClosed(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| workload | implementation | runs | locks/s | lock+unlock p50 | lock+unlock p99 | errors | locks/s vs redsync | p99 vs redsync |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		vsRS, p99RS := "-", "-"
		if rs, ok := findIn(rows, closedName, r.scenario, "redsync"); ok {
			vsRS = ratio(r.metrics["locks/s"], rs.metrics["locks/s"])
			p99RS = ratio(r.metrics["p99-ns"], rs.metrics["p99-ns"])
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.0f | %s | %s | %.0f | %s | %s |\n",
			r.scenario, r.impl, r.runs, r.metrics["locks/s"], dur(r.metrics["p50-ns"]), dur(r.metrics["p99-ns"]),
			r.sums["errors"], vsRS, p99RS)
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		rs, ok := findIn(rows, closedName, r.scenario, "redsync")
		if r.impl != "redlock" || !ok {
			continue
		}
		fmt.Fprintf(w, "- %s: this library %.0f locks/s against redsync's %.0f (%s), %.0f errors against %.0f\n",
			r.scenario, r.metrics["locks/s"], rs.metrics["locks/s"], ratio(r.metrics["locks/s"], rs.metrics["locks/s"]), r.sums["errors"], rs.sums["errors"])
	}
}

func renderLock(w io.Writer, rows []row) {
	floor, hasFloor := find(rows, "healthy", "floor")
	fmt.Fprintln(w, "| scenario | implementation | runs | time/op (acquire+release) | allocs/op | acquire p50 | acquire p99 | lock+unlock p99 | time/op vs floor | time/op vs redsync | p99 vs redsync | lock+unlock p99 vs redsync FailFast |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		vsFloor, vsRS, p99RS, cycleFF := "-", "-", "-", "-"
		if hasFloor {
			vsFloor = ratio(r.metrics["ns/op"], floor.metrics["ns/op"])
		}
		if rs, ok := find(rows, r.scenario, "redsync"); ok && r.impl != "floor" {
			vsRS = ratio(r.metrics["ns/op"], rs.metrics["ns/op"])
			p99RS = ratio(r.metrics["p99-ns"], rs.metrics["p99-ns"])
		}
		if ff, ok := find(rows, r.scenario, "redsync-failfast"); ok && r.impl != "floor" {
			cycleFF = ratio(r.metrics["cycle-p99-ns"], ff.metrics["cycle-p99-ns"])
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %.0f | %s | %s | %s | %s | %s | %s | %s |\n",
			r.scenario, r.impl, r.runs, dur(r.metrics["ns/op"]), r.metrics["allocs/op"],
			dur(r.metrics["p50-ns"]), dur(r.metrics["p99-ns"]), dur(r.metrics["cycle-p99-ns"]), vsFloor, vsRS, p99RS, cycleFF)
	}
	fmt.Fprintln(w)
	for _, g := range headlines(rows) {
		fmt.Fprintln(w, "- "+g)
	}
}

// headlines are the ratios the comparison is read for, on the medians.
func headlines(rows []row) []string {
	var out []string
	ours, okOurs := find(rows, "healthy", "redlock")
	floor, okFloor := find(rows, "healthy", "floor")
	rs, okRS := find(rows, "healthy", "redsync")
	if okOurs && okFloor {
		x := ours.metrics["ns/op"] / floor.metrics["ns/op"]
		out = append(out, fmt.Sprintf("healthy, Acquire+Release against the single-node floor: %.2f× (%s vs %s)",
			x, dur(ours.metrics["ns/op"]), dur(floor.metrics["ns/op"])))
	}
	if okOurs && okRS {
		x := ours.metrics["ns/op"] / rs.metrics["ns/op"]
		out = append(out, fmt.Sprintf("healthy, against redsync's defaults: %.2f× redsync's time (%s vs %s)",
			x, dur(ours.metrics["ns/op"]), dur(rs.metrics["ns/op"])))
	}
	slowOurs, ok1 := find(rows, "slow", "redlock")
	slowRS, ok2 := find(rows, "slow", "redsync")
	if ok1 && ok2 {
		x := slowRS.metrics["p99-ns"] / slowOurs.metrics["p99-ns"]
		out = append(out, fmt.Sprintf("one slow node, acquire p99 against redsync's defaults: %.1f× lower (%s vs %s)",
			x, dur(slowOurs.metrics["p99-ns"]), dur(slowRS.metrics["p99-ns"])))
		out = append(out, fmt.Sprintf("(for reference, one slow node, acquire p50: %.1f× lower, %s vs %s)",
			slowRS.metrics["p50-ns"]/slowOurs.metrics["p50-ns"], dur(slowOurs.metrics["p50-ns"]), dur(slowRS.metrics["p50-ns"])))
	}
	for _, sc := range []string{"healthy", "slow"} {
		o, ok1 := find(rows, sc, "redlock")
		ff, ok2 := find(rows, sc, "redsync-failfast")
		if ok1 && ok2 && ff.metrics["cycle-p99-ns"] > 0 {
			out = append(out, fmt.Sprintf("%s, sequential lock+unlock p99 against redsync WithFailFast(true): %.2f× (%s vs %s)",
				sc, o.metrics["cycle-p99-ns"]/ff.metrics["cycle-p99-ns"], dur(o.metrics["cycle-p99-ns"]), dur(ff.metrics["cycle-p99-ns"])))
		}
	}
	return out
}

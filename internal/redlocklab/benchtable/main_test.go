package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkLock/healthy/floor-2     	  2000	    100000 ns/op	     40000 p50-ns	     90000 p99-ns	     500 B/op	      10 allocs/op
BenchmarkLock/healthy/floor-2     	  2000	    120000 ns/op	     42000 p50-ns	     95000 p99-ns	     500 B/op	      10 allocs/op
BenchmarkLock/healthy/redlock-2   	  2000	    150000 ns/op	     70000 p50-ns	    200000 p99-ns	    9000 B/op	     150 allocs/op
BenchmarkLock/healthy/redsync-2   	  2000	    300000 ns/op	    150000 p50-ns	    400000 p99-ns	    5000 B/op	     140 allocs/op
BenchmarkLock/slow/redlock-2      	  2000	    200000 ns/op	     80000 p50-ns	    300000 p99-ns	    600000 cycle-p99-ns	    9000 B/op	     160 allocs/op
BenchmarkLock/slow/redsync-failfast-2	  2000	    210000 ns/op	     90000 p50-ns	    350000 p99-ns	    800000 cycle-p99-ns	    5000 B/op	     140 allocs/op
BenchmarkLock/slow/redsync-2      	  2000	  45000000 ns/op	  22000000 p50-ns	  25000000 p99-ns	    5000 B/op	     140 allocs/op
PASS
`

// interleavedSample has three rounds whose ratios' medians (0.90, 0.95,
// 1.00) differ from the ratios of the medians (200/220, 200/210, 400/400).
const interleavedSample = `BenchmarkInterleaved/healthy-2  2000  650000 ns/op  220000 failfast-p50-ns  400000 failfast-p99-ns  210000 floor-p50-ns  350000 floor-p99-ns  200000 redlock-p50-ns  400000 redlock-p99-ns  0.90 vs-failfast-p50  1.00 vs-failfast-p99  0.95 vs-floor-p50
BenchmarkInterleaved/healthy-2  2000  650000 ns/op  200000 failfast-p50-ns  380000 failfast-p99-ns  190000 floor-p50-ns  330000 floor-p99-ns  190000 redlock-p50-ns  390000 redlock-p99-ns  0.95 vs-failfast-p50  1.03 vs-failfast-p99  1.00 vs-floor-p50
BenchmarkInterleaved/healthy-2  2000  650000 ns/op  240000 failfast-p50-ns  420000 failfast-p99-ns  230000 floor-p50-ns  370000 floor-p99-ns  210000 redlock-p50-ns  410000 redlock-p99-ns  0.875 vs-failfast-p50  0.98 vs-failfast-p99  0.913 vs-floor-p50
BenchmarkInterleaved/slow-2  2000  850000 ns/op  230000 failfast-p50-ns  1000000 failfast-p99-ns  220000 floor-p50-ns  1100000 floor-p99-ns  210000 redlock-p50-ns  900000 redlock-p99-ns  0.913 vs-failfast-p50  0.90 vs-failfast-p99  0.955 vs-floor-p50
`

func TestParseMedians(t *testing.T) {
	rows, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 {
		t.Fatalf("got %d rows, want 6", len(rows))
	}
	irows, err := parse(strings.NewReader(interleavedSample))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := findIn(irows, interleavedName, "healthy", "")
	if !ok || len(irows) != 2 {
		t.Fatalf("got %d rows (healthy: %v), want healthy and slow", len(irows), ok)
	}
	if got := r.metrics["vs-failfast-p50"]; got != 0.90 || r.runs != 3 {
		t.Errorf("healthy vs-failfast-p50: got %v over %d rounds, want the median of the rounds' ratios, 0.90 over 3", got, r.runs)
	}
	for _, tc := range []struct {
		scenario, impl, unit string
		want                 float64
		runs                 int
	}{
		{"healthy", "floor", "ns/op", 110000, 2},
		{"healthy", "floor", "p99-ns", 92500, 2},
		{"healthy", "redlock", "allocs/op", 150, 1},
		{"slow", "redsync", "p50-ns", 22000000, 1},
	} {
		r, ok := find(rows, tc.scenario, tc.impl)
		if !ok {
			t.Fatalf("no row %s/%s", tc.scenario, tc.impl)
		}
		if got := r.metrics[tc.unit]; got != tc.want || r.runs != tc.runs {
			t.Errorf("%s/%s %s: got %v over %d runs, want %v over %d", tc.scenario, tc.impl, tc.unit, got, r.runs, tc.want, tc.runs)
		}
	}
}

const closedSample = `BenchmarkClosedLoop/distinct-64/fanout-2    	    2000	    265709 ns/op	         0 errors	      3800 locks/s	  15000000 p50-ns	  75000000 p99-ns
BenchmarkClosedLoop/distinct-64/redlock-2   	    2000	    331119 ns/op	         2.000 errors	      3300 locks/s	  19000000 p50-ns	  57000000 p99-ns
BenchmarkClosedLoop/distinct-64/redlock-2   	    2000	    331119 ns/op	         1.000 errors	      3500 locks/s	  21000000 p50-ns	  59000000 p99-ns
BenchmarkClosedLoop/distinct-64/redsync-2   	    2000	    298023 ns/op	         0 errors	      3400 locks/s	  18000000 p50-ns	  58000000 p99-ns
`

func TestRender(t *testing.T) {
	for _, tc := range []struct {
		name         string
		input        string
		want, absent []string
	}{
		{"BenchmarkLock and the slow-node tail", sample, []string{
			"| healthy | redlock | 1 | 150 µs | 150 | 70 µs | 200 µs | - | 1.36× | 0.50× | 0.50× | - |",
			"| slow | redlock | 1 | 200 µs | 160 | 80 µs | 300 µs | 600 µs | 1.82× | 0.00× | 0.01× | 0.75× |",
			"slow, sequential lock+unlock p99 against redsync WithFailFast(true): 0.75× (600 µs vs 800 µs)",
			"healthy, Acquire+Release against the single-node floor: 1.36× (150 µs vs 110 µs)",
			"healthy, against redsync's defaults: 0.50× redsync's time (150 µs vs 300 µs)",
			"one slow node, acquire p99 against redsync's defaults: 83.3× lower (300 µs vs 25.00 ms)",
			"acquire p50: 275.0× lower, 80 µs vs 22.00 ms",
		}, []string{"| workload |"}},
		{"BenchmarkClosedLoop", closedSample, []string{
			"| workload | implementation |",
			"| distinct-64 | redlock | 2 | 3400 | 20.00 ms | 58.00 ms | 3 | 1.00× | 1.00× |",
			"| distinct-64 | fanout | 1 | 3800 | 15.00 ms | 75.00 ms | 0 | 1.12× | 1.29× |",
			"- distinct-64: this library 3400 locks/s against redsync's 3400 (1.00×), 3 errors against 0",
		}, []string{"time/op"}},
		{"BenchmarkInterleaved", interleavedSample, []string{
			"| healthy | redlock | 3 | 200 µs | 400 µs |",
			"| healthy | quorum fan-out floor | 3 | 210 µs | 350 µs |",
			"| slow | redsync-failfast | 1 | 230 µs | 1.00 ms |",
			"- healthy, lock+unlock taking turns iteration by iteration (appendfsync no, median of 3 rounds): p50 0.90× redsync WithFailFast(true)'s and 0.95× the quorum fan-out floor's (200 µs against 220 µs and 210 µs); p99 1.00× redsync WithFailFast(true)'s (400 µs vs 400 µs)",
		}, []string{"time/op", "| workload |"}},
		{"all three", sample + interleavedSample + closedSample, []string{
			"| scenario | implementation | runs | time/op",
			"| scenario | implementation | rounds |",
			"| workload | implementation |",
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := parse(strings.NewReader(tc.input))
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			render(&b, rows)
			out := b.String()
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			for _, no := range tc.absent {
				if strings.Contains(out, no) {
					t.Errorf("output has %q, want it absent:\n%s", no, out)
				}
			}
		})
	}
}

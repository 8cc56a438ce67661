// Package loadgen is redlock-lab's load generator: an open-loop schedule of
// reservations against the inventory service (in-process replicas or remote
// instances), coordinated-omission-correct HdrHistogram recording, a safety
// checker (double grants, lost updates, oversell, fenced rejections), and the
// reports of a run: summary.json, an HdrHistogram interval log, wrk2-style
// percentile spectra and a self-contained HTML page.
//
// The pieces, one idea per file:
//
//	schedule.go   the open-loop pacer (stages, sharding, the clock)
//	keys.go       key and quantity distributions (uniform, zipf, hot)
//	recorder.go   per-worker histogram shards merged by a collector
//	target.go     what an operation is sent to
//	run.go        the engine: intended start times, in-flight bound, late counts
//	load.go       one run into a directory: seed, run, audit, record, render
//	status.go     the live status line
//	safety.go     the double-grant checker and the safety verdict
//	rundir.go     the run directory's raw record (run.json, intervals.jsonl)
//	hlog.go       the .hlog interval log
//	percentile.go percentiles, means and .hgrm spectra, by the reference HdrHistogram's rules
//	report.go     a run directory read back: totals, time series, faults
//	summary.go    summary.json and the text table
//	html.go       report.html (report.html.tmpl, embedded)
//	threshold.go  pass/fail expressions
//	sweep.go      SLO sweeps and the knee
//	merge.go      merging runs from several load machines
//	metrics.go    Prometheus metrics of the generator itself
//
// Latency is measured from each operation's intended start (corrected) and
// from its actual start (uncorrected); both are kept. An operation that could
// not start within the lateness tolerance is counted, never dropped silently.
package loadgen

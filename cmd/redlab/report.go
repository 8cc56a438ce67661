package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/loadgen"
)

func init() {
	register(command{name: "report", summary: "re-render a run (or sweep) directory's reports; judge thresholds again", run: runReport})
}

func runReport(ctx context.Context, e *env, args []string) int {
	fs := pflag.NewFlagSet("report", pflag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var ths thresholdsFlag
	fs.Var(&ths, "threshold", "pass/fail condition, repeatable, as for load: 'acquire.p99<20ms' (default: those the run was judged by)")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: redlab report DIR [--threshold EXPR ...]")
		fmt.Fprintln(e.stderr, "\nRebuilds summary.json, summary.txt, *.hgrm and report.html from the run directory's raw record")
		fmt.Fprintln(e.stderr, "(run.json, intervals.jsonl, latency.hlog, safety.json, faults.jsonl). A sweep directory is re-rendered step by step.")
		fmt.Fprintln(e.stderr, "Exit 0 ok, 1 failure, 2 usage error, 99 a threshold failed.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(e.stderr, "redlab report: %v\n", err)
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(e.stderr, "redlab report: want exactly one run directory")
		return exitUsage
	}
	dir := fs.Arg(0)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		fmt.Fprintf(e.stderr, "redlab report: %s is not a directory\n", dir)
		return exitUsage
	}
	if loadgen.IsSweep(dir) {
		if len(ths) > 0 {
			fmt.Fprintln(e.stderr, "redlab report: a sweep is judged by its own SLO; --threshold applies to run directories")
			return exitUsage
		}
		if err := loadgen.RenderSweep(dir); err != nil {
			fmt.Fprintf(e.stderr, "redlab report: %v\n", err)
			return exitFailure
		}
		txt, err := os.ReadFile(filepath.Join(dir, loadgen.TextFile))
		if err != nil {
			fmt.Fprintf(e.stderr, "redlab report: %v\n", err)
			return exitFailure
		}
		e.stdout.Write(txt)
		fmt.Fprintf(e.stdout, "report: %s\n", filepath.Join(dir, loadgen.HTMLFile))
		return exitOK
	}
	r, err := loadgen.LoadReport(dir)
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab report: %v\n", err)
		return exitFailure
	}
	if len(ths) == 0 {
		if ths, err = r.RecordedThresholds(); err != nil {
			fmt.Fprintf(e.stderr, "redlab report: %v\n", err)
			return exitFailure
		}
	}
	failed := r.Judge(ths)
	if err := r.Write(); err != nil {
		fmt.Fprintf(e.stderr, "redlab report: %v\n", err)
		return exitFailure
	}
	return report(e, r, failed)
}

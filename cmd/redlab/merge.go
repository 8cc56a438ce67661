package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/loadgen"
)

func init() {
	register(command{name: "merge", summary: "merge the run directories of several load machines and judge the whole", run: runMerge})
}

func runMerge(ctx context.Context, e *env, args []string) int {
	fs := pflag.NewFlagSet("merge", pflag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var (
		ths thresholdsFlag
		out string
	)
	fs.StringVar(&out, "out", "", "directory for the merged run (required; must not hold a run)")
	fs.Var(&ths, "threshold", "pass/fail condition on the merged run, repeatable: 'acquire.p99<20ms'")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: redlab merge DIR DIR... --out DIR [--threshold EXPR ...]")
		fmt.Fprintln(e.stderr, "\nMerges runs of `redlab load --worker i/M` (or any runs side by side) per interval of wall-clock time:")
		fmt.Fprintln(e.stderr, "histograms are merged, counters and safety counts summed; thresholds are judged on the merged histograms.")
		fmt.Fprintln(e.stderr, "Exit 0 ok, 1 failure, 2 usage error, 99 a threshold failed.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(e.stderr, "redlab merge: %v\n", err)
		return exitUsage
	}
	if fs.NArg() < 1 || out == "" {
		fmt.Fprintln(e.stderr, "redlab merge: want one or more run directories and --out")
		return exitUsage
	}
	if err := checkOut(out); err != nil {
		fmt.Fprintf(e.stderr, "redlab merge: %v\n", err)
		return exitFailure
	}
	if err := loadgen.Merge(fs.Args(), out, ths); err != nil {
		fmt.Fprintf(e.stderr, "redlab merge: %v\n", err)
		return exitFailure
	}
	r, err := loadgen.LoadReport(out)
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab merge: %v\n", err)
		return exitFailure
	}
	failed := r.Judge(ths)
	if err := r.Write(); err != nil {
		fmt.Fprintf(e.stderr, "redlab merge: %v\n", err)
		return exitFailure
	}
	return report(e, r, failed)
}

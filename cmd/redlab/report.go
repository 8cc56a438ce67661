package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/redlocklab/redlocklab/loadgen"
)

func newReportCmd(e *env) *cobra.Command {
	var ths thresholdsFlag
	c := &cobra.Command{
		Use:   "report DIR",
		Short: "re-render a run (or sweep) directory's reports; judge thresholds again",
		Long: `Rebuilds summary.json, summary.txt, *.hgrm and report.html from the run
directory's raw record (run.json, intervals.jsonl, latency.hlog, safety.json,
faults.jsonl). A sweep directory is re-rendered step by step.

Exit 0 ok, 1 failure, 2 usage error, 99 a threshold failed.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("want exactly one run directory, got %d", len(args))
			}
			if fi, err := os.Stat(args[0]); err != nil || !fi.IsDir() {
				return usageErrorf("%s is not a directory", args[0])
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			dir := args[0]
			if loadgen.IsSweep(dir) {
				if len(ths) > 0 {
					return usageErrorf("a sweep is judged by its own SLO; --threshold applies to run directories")
				}
				if err := loadgen.RenderSweep(dir); err != nil {
					return err
				}
				txt, err := os.ReadFile(filepath.Join(dir, loadgen.TextFile))
				if err != nil {
					return err
				}
				if _, err := e.stdout.Write(txt); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "report: %s\n", filepath.Join(dir, loadgen.HTMLFile))
				return nil
			}
			r, err := loadgen.LoadReport(dir)
			if err != nil {
				return err
			}
			if err := ths.checkNodes("--threshold", len(r.Summary.PerNode), "the run has no per-node latency"); err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if len(ths) == 0 {
				if ths, err = r.RecordedThresholds(); err != nil {
					return err
				}
			}
			failed := r.Judge(ths)
			if err := r.Write(); err != nil {
				return err
			}
			return report(e, r, failed)
		},
	}
	c.Flags().Var(&ths, "threshold", "pass/fail condition, repeatable, as for load: 'acquire.p99<20ms' (default: those the run was judged by)")
	return c
}

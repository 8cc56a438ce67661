package main

import (
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/redlocklab/redlocklab/loadgen"
)

func newMergeCmd(e *env) *cobra.Command {
	var (
		ths thresholdsFlag
		out string
	)
	c := &cobra.Command{
		Use:   "merge DIR... --out DIR",
		Short: "merge the run directories of several load machines and judge the whole",
		Long: `Merges runs of 'redlab load --worker i/M' (or any runs side by side) per
interval of wall-clock time: histograms are merged, counters and safety
counts summed; thresholds are judged on the merged histograms.

Exit 0 ok, 1 failure, 2 usage error, 99 a threshold failed.`,
		Example: `  redlab merge runs/w0 runs/w1 --out runs/merged --threshold 'acquire.p99<20ms'`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("want one or more run directories")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, dirs []string) error {
			if out == "" {
				return usageErrorf("--out is required")
			}
			for _, d := range dirs {
				if filepath.Clean(d) == filepath.Clean(out) {
					return usageErrorf("--out %s is one of the runs to merge: choose another", out)
				}
			}
			if err := loadgen.PrepareDir(out, false); err != nil {
				return err
			}
			if err := loadgen.Merge(dirs, out, ths); err != nil {
				return err
			}
			r, err := loadgen.LoadReport(out)
			if err != nil {
				return err
			}
			failed := r.Judge(ths)
			if err := r.Write(); err != nil {
				return err
			}
			return report(e, r, failed)
		},
	}
	c.Flags().StringVar(&out, "out", "", "directory for the merged run (required; an earlier run there is replaced)")
	c.Flags().Var(&ths, "threshold", "pass/fail condition on the merged run, repeatable: 'acquire.p99<20ms'")
	return c
}

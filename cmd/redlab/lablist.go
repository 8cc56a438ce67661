package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/redlocklab/redlocklab/infra/lab"
)

func newLabListCmd(e *env) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list",
		Short: "every lab on the machine: state dir, nodes, up or down, owner and whether it is gone",
		Long: `Lists every lab on the machine, wherever its state directory is (each
'lab up' registers its lab in ` + lab.RegistryDir() + `, $` + lab.RegistryEnv + ` when set;
'lab down' removes it): its state directory, nodes and etcd members, how
many of their supervisors run, and its owner.

A lab brought up by a drill (or 'lab up --owner PID') has an owner: once the
owner ends, the lab takes itself down. An orphan is a lab whose owner is
gone; 'lab down --all' takes the orphans down. A registry entry that names
no lab is reported on stderr and removed.`,
		RunE: func(c *cobra.Command, _ []string) error {
			labs, problems := lab.List()
			for _, p := range problems {
				fmt.Fprintf(e.stderr, "redlab lab list: %v\n", p)
			}
			if asJSON {
				if labs == nil {
					labs = []lab.Listed{}
				}
				return writeJSON(e.stdout, labs)
			}
			if len(labs) == 0 {
				fmt.Fprintln(e.stdout, "no labs")
				return nil
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STATE DIR\tNODES\tSTATE\tOWNER\tOWNER ALIVE")
			for _, l := range labs {
				nodes := strconv.Itoa(l.Nodes)
				if l.Etcd > 0 {
					nodes += fmt.Sprintf(" + %d etcd", l.Etcd)
				}
				state := l.State()
				if state == "partial" {
					state = fmt.Sprintf("partial (%d of %d supervisors)", l.Running, l.Nodes+l.Etcd)
				}
				owner, alive := "-", "-"
				if l.Owner != nil {
					owner, alive = strconv.Itoa(l.Owner.PID), "yes"
					if l.Orphan {
						alive = "no (orphan)"
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.StateDir, nodes, state, owner, alive)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the labs as JSON, for scripts")
	return c
}

// downAll is `lab down --all [--force]`.
func downAll(ctx context.Context, e *env, cfg lab.Config, force bool) error {
	down, problems, err := lab.DownAll(ctx, cfg, force)
	for _, p := range problems {
		fmt.Fprintf(e.stderr, "redlab lab down: %v\n", p)
	}
	for _, d := range down {
		fmt.Fprintf(e.stdout, "lab down: %s is clear\n", d)
	}
	if err != nil {
		return err
	}
	if len(down) == 0 {
		what := "no orphan labs (labs whose owner is gone)"
		if force {
			what = "no labs"
		}
		fmt.Fprintf(e.stdout, "lab down --all: %s\n", what)
	}
	return nil
}

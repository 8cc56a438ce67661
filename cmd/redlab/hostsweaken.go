package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redlocklab/redlocklab/infra/hostfault"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/remote"
)

func newHostsWeakenCmd(e *env) *cobra.Command {
	o := &hostsOptions{}
	flags := map[string]*bool{}
	c := &cobra.Command{
		Use:   "weaken --hosts FILE [N...] --everysec|--no-delay|--no-persistence...",
		Short: "weaken hosts of a drill environment for a drill (the runbooks' edits), restarting Redis cleanly; 'hosts restore' undoes it",
		Args:  nodeArgs(0, -1),
	}
	for _, w := range hostfault.Weakenings {
		flags[w.Name] = c.Flags().Bool(w.Name, false, w.Summary)
	}
	addHostsFlags(c.Flags(), o)
	c.RunE = func(c *cobra.Command, args []string) error {
		var names []string
		for _, w := range hostfault.Weakenings {
			if *flags[w.Name] {
				names = append(names, w.Name)
			}
		}
		if o.file == "" || len(names) == 0 {
			return usageErrorf("want --hosts FILE and at least one of --everysec, --no-delay, --no-persistence")
		}
		// Refused before any connection: a production inventory is never
		// touched.
		inv, err := hosts.Load(o.file)
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		if err := inv.CheckDrillEnvironment(); err != nil {
			return err
		}
		nodes, _ := parseNodeNumbers(args)
		return onHosts(c.Context(), e, *o, nodes, func(ctx context.Context, s *hostsSession, i int, cl *remote.Client) error {
			if err := hostfault.Weaken(ctx, s.inv, cl, names...); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "host %d: weakened: %s (redlab hosts restore undoes it)\n", s.nums[i], strings.Join(names, ", "))
			return nil
		})
	}
	return c
}

func newHostsRestoreCmd(e *env) *cobra.Command {
	o := &hostsOptions{}
	c := &cobra.Command{
		Use:   "restore --hosts FILE [N...]",
		Short: "undo every weakening on the hosts and restart Redis cleanly",
		Args:  nodeArgs(0, -1),
		RunE: func(c *cobra.Command, args []string) error {
			if o.file == "" {
				return usageErrorf("--hosts FILE is required")
			}
			nodes, _ := parseNodeNumbers(args)
			return onHosts(c.Context(), e, *o, nodes, func(ctx context.Context, s *hostsSession, i int, cl *remote.Client) error {
				if err := hostfault.Restore(ctx, cl); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "host %d: restored the production profile\n", s.nums[i])
				return nil
			})
		},
	}
	addHostsFlags(c.Flags(), o)
	return c
}

// onHosts connects to the hosts and runs f on each at once, bounded by
// two minutes and the first signal.
func onHosts(ctx context.Context, e *env, o hostsOptions, nodes []int, f func(context.Context, *hostsSession, int, *remote.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ctx, cancelSig := cancelOnSignal(ctx, e)
	defer cancelSig()
	s, err := dialHosts(ctx, e, o, nodes)
	if err != nil {
		return err
	}
	defer s.close()
	return s.each(func(i int, cl *remote.Client) error { return f(ctx, s, i, cl) })
}

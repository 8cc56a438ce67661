package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redlocklab/redlocklab/infra/hostfault"
	"github.com/redlocklab/redlocklab/infra/hosts"
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
		return onHosts(c.Context(), e, *o, nodes, func(ctx context.Context, s *hostfault.Session, n int) error {
			if err := s.Weaken(ctx, n, names...); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "host %d: weakened: %s (redlab hosts restore undoes it)\n", n, strings.Join(names, ", "))
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
			return onHosts(c.Context(), e, *o, nodes, func(ctx context.Context, s *hostfault.Session, n int) error {
				if err := s.Restore(ctx, n); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "host %d: restored the production profile\n", n)
				return nil
			})
		},
	}
	addHostsFlags(c.Flags(), o)
	return c
}

// onHosts connects to the hosts and runs f on each at once, bounded by
// two minutes and the first signal.
func onHosts(ctx context.Context, e *env, o hostsOptions, nodes []int, f func(context.Context, *hostfault.Session, int) error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ctx, cancelSig := cancelOnSignal(ctx, e)
	defer cancelSig()
	inv, nodes, err := loadHosts(o, nodes)
	if err != nil {
		return err
	}
	s, err := dialHosts(ctx, e, o, inv, nodes, hostfault.SessionOptions{})
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Each(func(n int) error { return f(ctx, s, n) })
}

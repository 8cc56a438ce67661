package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redlocklab/redlocklab/infra/hostfault"
)

func newHealCmd(e *env) *cobra.Command {
	o := &hostsOptions{}
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "heal --hosts FILE [N...]",
		Short: "heal everything redlab may have left on real hosts: faults, their dead-man timers, iptables chains, netem, stopped or paused Redis",
		Long: `Heals the hosts of an inventory (all, or hosts N...) over SSH: it runs the heal
of every fault still in force and disarms its dead-man timer, then sweeps for
what redlab puts on a host: iptables chains named redlab-*, netem root qdiscs,
runtime drop-ins redlab-*.conf of redlock-redis, a paused or stopped
redlock-redis, a stopped chrony, and armed redlab-heal-* timers. Run it after
a drill that was interrupted, and before the next one.`,
		Args: nodeArgs(0, -1),
		RunE: func(c *cobra.Command, args []string) error {
			if o.file == "" {
				return usageErrorf("--hosts FILE is required (the lab heals with 'redlab fault heal')")
			}
			nodes, _ := parseNodeNumbers(args)
			return runHeal(c.Context(), e, *o, nodes, timeout)
		},
	}
	addHostsFlags(c.Flags(), o)
	c.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up on a host after this long")
	return c
}

func runHeal(ctx context.Context, e *env, o hostsOptions, nodes []int, timeout time.Duration) error {
	if timeout <= 0 {
		return usageErrorf("--timeout must be positive, got %v", timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
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
	outs, err := s.HealAll(ctx)
	for _, n := range nodes {
		out := strings.TrimSpace(outs[n])
		if out == "" {
			out = "nothing to heal"
		}
		for _, line := range strings.Split(out, "\n") {
			fmt.Fprintf(e.stdout, "host %d (%s): %s\n", n, inv.Hosts[n-1].Label(n), line)
		}
	}
	return err
}

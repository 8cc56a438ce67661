package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/node"
)

// parseEtcdTarget reads "leader" (lab.TargetLeader: the member that leads
// when the fault fires) or a member number from 1.
func parseEtcdTarget(s string) (int, error) {
	if s == "leader" {
		return lab.TargetLeader, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, usageErrorf("etcd member %q: want a member number from 1, or leader", s)
	}
	return n, nil
}

func newFaultEtcdCmd(e *env, o *faultOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "etcd",
		Short: "inject a fault into an etcd member of the lab (lab up --etcd 3): kill leader, pause 2 --for 3s, ...",
		Long: `Injects a fault into an etcd member. A member is a number from 1, or
"leader": the member that leads when the fault fires (the record names it).
partition and latency act on the member's client and peer fronts, heal
removes them (every member's by default).`,
	}
	// Every kind of the catalogue an etcd member applies, heal apart (it
	// takes several members, below).
	for _, d := range fault.Defs() {
		if d.Can(fault.EtcdMember) && d.Kind != fault.Heal {
			c.AddCommand(newFaultEtcdKindCmd(e, d, o))
		}
	}
	c.AddCommand(&cobra.Command{
		Use:   "heal [MEMBER...]",
		Short: "remove partitions and latency (all members by default)",
		Args: func(_ *cobra.Command, args []string) error {
			_, err := parseNodeNumbers(args)
			return err
		},
		RunE: func(c *cobra.Command, args []string) error {
			ms, _ := parseNodeNumbers(args) // Args accepted them
			l, err := lab.Open(stateDir(o.stateDir))
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
			defer cancel()
			on := ms
			if len(on) == 0 {
				for _, m := range l.EtcdMembers() {
					on = append(on, m.ID)
				}
			}
			for _, m := range on {
				if _, err := l.EtcdInjector(m).Apply(ctx, fault.Heal, nil); err != nil {
					return err
				}
			}
			if len(ms) == 0 {
				fmt.Fprintln(e.stdout, "heal: all etcd members")
				return nil
			}
			fmt.Fprintln(e.stdout, "heal: etcd members", intList(ms))
			return nil
		},
	})
	return c
}

func newFaultEtcdKindCmd(e *env, d fault.Def, o *faultOptions) *cobra.Command {
	params := fault.Params{}
	c := &cobra.Command{
		Use:   faultUse(d, "MEMBER"),
		Short: d.Summary + " (MEMBER: a number, or leader)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("takes exactly one member (a number, or leader), got %d", len(args))
			}
			_, err := parseEtcdTarget(args[0])
			return err
		},
	}
	addParamFlags(c.Flags(), d, params)
	c.RunE = func(c *cobra.Command, args []string) error {
		if err := validate(d.Kind, params, fault.EtcdMember, false); err != nil {
			return err
		}
		member, _ := parseEtcdTarget(args[0]) // Args accepted it
		l, err := lab.Open(stateDir(o.stateDir))
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
		defer cancel()
		ctx, cancelSig := cancelOnSignal(ctx, e)
		defer cancelSig()
		res, err := l.EtcdInjector(member).Apply(ctx, d.Kind, params)
		if errors.Is(err, lab.ErrInvalid) || errors.Is(err, fault.ErrInvalid) {
			return &exitError{code: exitUsage, err: err}
		}
		if err != nil {
			return err
		}
		delay := crashDelay(l, d.Kind, params)
		printEtcdFaultResult(e.stdout, c.Name(), res, delay)
		return nil
	}
	return c
}

func printEtcdFaultResult(w io.Writer, kind string, res fault.Result, delay time.Duration) {
	fmt.Fprintf(w, "%s etcd member %d: %s", kind, res.Target, stateText(node.State(res.State), "etcd", delay))
	if res.ID != "" {
		if res.Params["target"] == "leader" {
			fmt.Fprint(w, ", chosen as the leader")
		}
		fmt.Fprintf(w, " (fault %s from %s)", res.ID, res.Start.Format("15:04:05.000"))
	}
	fmt.Fprintln(w)
}

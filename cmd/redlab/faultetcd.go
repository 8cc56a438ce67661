package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redlocklab/redlocklab/infra/lab"
)

// etcdFault is what a kind of faultKinds does to an etcd member: its help
// line and its call.
type etcdFault struct {
	short string
	do    func(ctx context.Context, l *lab.Lab, member int, o *faultOptions) (lab.EtcdFaultResult, error)
}

// etcdFaults are the kinds of faultKinds that apply to an etcd member;
// `redlab fault etcd KIND` takes the kind's flags and checks from
// faultKinds, so the two cannot drift.
var etcdFaults = map[string]etcdFault{
	"kill": {short: "SIGKILL etcd; it restarts after the lab's restart delay", do: func(ctx context.Context, l *lab.Lab, m int, _ *faultOptions) (lab.EtcdFaultResult, error) {
		return l.EtcdKill(ctx, m)
	}},
	"power-loss": {short: "SIGKILL etcd and cut its data directory back to what it had fsynced; it restarts after the restart delay", do: func(ctx context.Context, l *lab.Lab, m int, _ *faultOptions) (lab.EtcdFaultResult, error) {
		return l.EtcdPowerLoss(ctx, m)
	}},
	"restart": {short: "SIGKILL etcd and restart it after D (0: at once)", do: func(ctx context.Context, l *lab.Lab, m int, o *faultOptions) (lab.EtcdFaultResult, error) {
		return l.EtcdRestart(ctx, m, o.delay)
	}},
	"stop": {short: "shut etcd down cleanly (SIGTERM); it stays down", do: func(ctx context.Context, l *lab.Lab, m int, _ *faultOptions) (lab.EtcdFaultResult, error) {
		return l.EtcdStop(ctx, m)
	}},
	"start": {short: "start a stopped member again", do: func(ctx context.Context, l *lab.Lab, m int, _ *faultOptions) (lab.EtcdFaultResult, error) {
		return l.EtcdStart(ctx, m)
	}},
	"pause": {short: "SIGSTOP etcd for D (returns at once)", do: func(ctx context.Context, l *lab.Lab, m int, o *faultOptions) (lab.EtcdFaultResult, error) {
		return l.EtcdPause(ctx, m, o.forD)
	}},
	"partition": {short: "the member's client and peer fronts pass nothing (see infra/lab/etcdsupervisor.go for what that cuts)", do: func(ctx context.Context, l *lab.Lab, m int, _ *faultOptions) (lab.EtcdFaultResult, error) {
		return l.EtcdPartition(ctx, m)
	}},
	"latency": {short: "delay what the member's fronts send back by D±jitter, whole milliseconds (--add 0 removes it)", do: func(ctx context.Context, l *lab.Lab, m int, o *faultOptions) (lab.EtcdFaultResult, error) {
		return l.EtcdLatency(ctx, m, time.Duration(o.add), time.Duration(o.jitter))
	}},
}

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
	for _, k := range faultKinds {
		name, _, _ := strings.Cut(k.use, " ")
		f, ok := etcdFaults[name]
		if !ok {
			continue
		}
		c.AddCommand(newFaultEtcdKindCmd(e, k, name, f, o))
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
			if err := l.EtcdHeal(ctx, ms...); err != nil {
				return err
			}
			if len(ms) == 0 {
				fmt.Fprintln(e.stdout, "heal: all etcd members")
				return nil
			}
			fmt.Fprintln(e.stdout, "heal: etcd members", ms)
			return nil
		},
	})
	return c
}

func newFaultEtcdKindCmd(e *env, k faultKind, name string, f etcdFault, o *faultOptions) *cobra.Command {
	_, rest, _ := strings.Cut(k.use, " ")
	c := &cobra.Command{
		Use:   name + " " + strings.Replace(strings.Replace(rest, "N...", "MEMBER", 1), "N", "MEMBER", 1),
		Short: f.short + " (MEMBER: a number, or leader)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("takes exactly one member (a number, or leader), got %d", len(args))
			}
			_, err := parseEtcdTarget(args[0])
			return err
		},
	}
	if k.flags != nil {
		k.flags(c.Flags(), o)
	}
	c.RunE = func(c *cobra.Command, args []string) error {
		if k.check != nil {
			if err := k.check(c.Flags(), o); err != nil {
				return &exitError{code: exitUsage, err: err}
			}
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
		res, err := f.do(ctx, l, member, o)
		if errors.Is(err, lab.ErrInvalid) {
			return &exitError{code: exitUsage, err: err}
		}
		if err != nil {
			return err
		}
		printEtcdFaultResult(e.stdout, name, res)
		return nil
	}
	return c
}

func printEtcdFaultResult(w io.Writer, kind string, res lab.EtcdFaultResult) {
	fmt.Fprintf(w, "%s etcd member %d: now %s", kind, res.Status.ID, res.Status.State)
	if f := res.Fault; f != nil {
		if f.Params["target"] == "leader" {
			fmt.Fprint(w, ", chosen as the leader")
		}
		fmt.Fprintf(w, " (fault %s from %s)", f.ID, f.Start.Format("15:04:05.000"))
	}
	fmt.Fprintln(w)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
)

// faultOptions are the flags of `redlab fault`: the shared ones, and each
// kind's own.
type faultOptions struct {
	stateDir    string
	timeout     time.Duration
	delay       time.Duration
	forD        time.Duration
	add, jitter msDurationFlag
	by          time.Duration
	factor      float64
	lag         time.Duration
}

// faultKind is one `redlab fault` subcommand.
type faultKind struct {
	use, short string
	// min and max bound the node arguments; max -1: any number.
	min, max int
	flags    func(fs *pflag.FlagSet, o *faultOptions)
	// check validates the kind's flags; fs tells which were given.
	check func(fs *pflag.FlagSet, o *faultOptions) error
	// do injects the fault into the lab's nodes.
	do func(ctx context.Context, l *lab.Lab, nodes []int, o *faultOptions) (lab.FaultResult, error)
}

var faultKinds = []faultKind{
	{use: "kill N", short: "SIGKILL redis-server; it restarts after the restart delay", min: 1, max: 1,
		do: func(ctx context.Context, l *lab.Lab, n []int, _ *faultOptions) (lab.FaultResult, error) {
			return l.Kill(ctx, n[0])
		}},
	{use: "power-loss N", short: "crash the node losing what it had not fsynced (from its real fsync calls: always loses nothing)", min: 1, max: 1,
		do: func(ctx context.Context, l *lab.Lab, n []int, _ *faultOptions) (lab.FaultResult, error) {
			return l.PowerLoss(ctx, n[0])
		}},
	{use: "restart N --delay D", short: "SIGKILL redis-server and restart it after D (0: at once)", min: 1, max: 1,
		flags: func(fs *pflag.FlagSet, o *faultOptions) {
			fs.DurationVar(&o.delay, "delay", 0, "restart delay override (required; 0 restarts at once)")
		},
		check: func(fs *pflag.FlagSet, o *faultOptions) error {
			if !fs.Changed("delay") || o.delay < 0 {
				return errors.New("--delay D (>= 0) is required")
			}
			return nil
		},
		do: func(ctx context.Context, l *lab.Lab, n []int, o *faultOptions) (lab.FaultResult, error) {
			return l.Restart(ctx, n[0], o.delay)
		}},
	{use: "stop N", short: "shut redis-server down cleanly (SIGTERM); it stays down", min: 1, max: 1,
		do: func(ctx context.Context, l *lab.Lab, n []int, _ *faultOptions) (lab.FaultResult, error) {
			return l.Stop(ctx, n[0])
		}},
	{use: "start N", short: "start a stopped node again", min: 1, max: 1,
		do: func(ctx context.Context, l *lab.Lab, n []int, _ *faultOptions) (lab.FaultResult, error) {
			return l.Start(ctx, n[0])
		}},
	{use: "pause N --for D", short: "SIGSTOP redis-server for D (returns at once)", min: 1, max: 1,
		flags: func(fs *pflag.FlagSet, o *faultOptions) {
			fs.DurationVar(&o.forD, "for", 0, "how long the node stays paused (required)")
		},
		check: func(_ *pflag.FlagSet, o *faultOptions) error {
			if o.forD <= 0 {
				return errors.New("--for D (> 0) is required")
			}
			return nil
		},
		do: func(ctx context.Context, l *lab.Lab, n []int, o *faultOptions) (lab.FaultResult, error) {
			return l.Pause(ctx, n[0], o.forD)
		}},
	{use: "partition N...", short: "the proxy answers nothing: clients time out", min: 1, max: -1,
		do: func(ctx context.Context, l *lab.Lab, n []int, _ *faultOptions) (lab.FaultResult, error) {
			return lab.FaultResult{}, l.Partition(ctx, n...)
		}},
	{use: "heal [N...]", short: "remove partitions and latency (all nodes by default)", min: 0, max: -1,
		do: func(ctx context.Context, l *lab.Lab, n []int, _ *faultOptions) (lab.FaultResult, error) {
			return lab.FaultResult{}, l.Heal(ctx, n...)
		}},
	{use: "latency N --add D [--jitter D]", short: "delay every reply by D±jitter, in whole milliseconds (--add 0 removes it)", min: 1, max: 1,
		flags: func(fs *pflag.FlagSet, o *faultOptions) {
			fs.Var(&o.add, "add", "added delay per reply, whole milliseconds (required; 0 removes)")
			fs.Var(&o.jitter, "jitter", "± jitter on the added delay, whole milliseconds")
		},
		check: func(fs *pflag.FlagSet, _ *faultOptions) error {
			if !fs.Changed("add") {
				return errors.New("--add D is required (0 removes the latency)")
			}
			return nil
		},
		do: func(ctx context.Context, l *lab.Lab, n []int, o *faultOptions) (lab.FaultResult, error) {
			return l.Latency(ctx, n[0], time.Duration(o.add), time.Duration(o.jitter))
		}},
	{use: "clock-jump N --by D", short: "model the node's clock stepping by D: every key's TTL shortens by D (--by=-D lengthens)", min: 1, max: 1,
		flags: func(fs *pflag.FlagSet, o *faultOptions) {
			fs.DurationVar(&o.by, "by", 0, "the step (required; negative steps back: --by=-5s)")
		},
		check: func(_ *pflag.FlagSet, o *faultOptions) error {
			if o.by == 0 {
				return errors.New("--by D (non-zero) is required")
			}
			return nil
		},
		do: func(ctx context.Context, l *lab.Lab, n []int, o *faultOptions) (lab.FaultResult, error) {
			return l.ClockJump(ctx, n[0], o.by)
		}},
	{use: "clock-rate N --factor F --for D", short: "model the node's clock running F times real speed for D", min: 1, max: 1,
		flags: func(fs *pflag.FlagSet, o *faultOptions) {
			fs.DurationVar(&o.forD, "for", 0, "how long the clock runs fast (required)")
			fs.Float64Var(&o.factor, "factor", 0, "clock speed relative to real time, e.g. 1.5 (required)")
		},
		check: func(_ *pflag.FlagSet, o *faultOptions) error {
			switch {
			case o.forD <= 0:
				return errors.New("--for D (> 0) is required")
			case !(o.factor > 0):
				return errors.New("--factor F (> 0) is required")
			}
			return nil
		},
		do: func(ctx context.Context, l *lab.Lab, n []int, o *faultOptions) (lab.FaultResult, error) {
			return l.ClockRate(ctx, n[0], o.factor, o.forD)
		}},
	{use: "failover N [--lag D]", short: "crash the node's master and promote its replica behind the node's address (labs with --replicas 1)", min: 1, max: 1,
		flags: func(fs *pflag.FlagSet, o *faultOptions) {
			fs.DurationVar(&o.lag, "lag", 0, "hold replication back this long before the crash, so the writes of the last D are lost")
		},
		check: func(_ *pflag.FlagSet, o *faultOptions) error {
			if o.lag < 0 || o.lag > time.Hour {
				return fmt.Errorf("--lag must be 0..1h, got %v", o.lag)
			}
			return nil
		},
		do: func(ctx context.Context, l *lab.Lab, n []int, o *faultOptions) (lab.FaultResult, error) {
			if l.Replicas() == 0 {
				return lab.FaultResult{}, fmt.Errorf("%w: the lab has no replicas (bring it up with --replicas 1)", lab.ErrInvalid)
			}
			return l.Failover(ctx, n[0], o.lag)
		}},
}

func newFaultCmd(e *env) *cobra.Command {
	o := &faultOptions{}
	c := &cobra.Command{
		Use:   "fault",
		Short: "inject a fault into a lab node: kill, restart, pause, partition, latency, clock-jump, failover, ...",
		Long: `Injects a fault into a node of the lab. Nodes are numbered from 1. Every
fault is recorded with its start and end time in STATE_DIR/faults.jsonl
('redlab fault list' shows them).`,
	}
	c.PersistentFlags().StringVar(&o.stateDir, "state-dir", "", stateDirUsage)
	c.PersistentFlags().DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up waiting for the node after this long")
	for _, k := range faultKinds {
		c.AddCommand(newFaultKindCmd(e, k, o))
	}
	c.AddCommand(newFaultEtcdCmd(e, o))
	c.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "the faults recorded so far (faults.jsonl)",
		RunE: func(*cobra.Command, []string) error {
			l, err := lab.Open(stateDir(o.stateDir))
			if err != nil {
				return err
			}
			return listFaults(e.stdout, l)
		},
	})
	return c
}

func newFaultKindCmd(e *env, k faultKind, o *faultOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   k.use,
		Short: k.short,
		Args:  nodeArgs(k.min, k.max),
	}
	if k.flags != nil {
		k.flags(c.Flags(), o)
	}
	c.RunE = func(c *cobra.Command, args []string) error {
		if o.timeout <= 0 {
			return usageErrorf("--timeout must be positive, got %v", o.timeout)
		}
		if k.check != nil {
			if err := k.check(c.Flags(), o); err != nil {
				return &exitError{code: exitUsage, err: err}
			}
		}
		nodes, _ := parseNodeNumbers(args) // nodeArgs accepted them
		l, err := lab.Open(stateDir(o.stateDir))
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n > len(l.Nodes()) {
				return usageErrorf("no node %d: the lab has nodes 1-%d", n, len(l.Nodes()))
			}
		}
		ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
		defer cancel()
		ctx, cancelSig := cancelOnSignal(ctx, e)
		defer cancelSig()
		res, err := k.do(ctx, l, nodes, o)
		if errors.Is(err, lab.ErrInvalid) {
			return &exitError{code: exitUsage, err: err}
		}
		if err != nil {
			return err
		}
		printFaultResult(e.stdout, c.Name(), nodes, res)
		return nil
	}
	return c
}

// nodeArgs accepts between min and max node numbers (max -1: any number).
func nodeArgs(min, max int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if _, err := parseNodeNumbers(args); err != nil {
			return err
		}
		switch {
		case len(args) >= min && (max < 0 || len(args) <= max):
			return nil
		case max == 0:
			return usageErrorf("takes no node, got %q", args)
		case min == max:
			return usageErrorf("takes exactly %s, got %d", nodeNumbers(min), len(args))
		}
		return usageErrorf("needs at least %s", nodeNumbers(min))
	}
}

func nodeNumbers(n int) string {
	if n == 1 {
		return "one node number"
	}
	return strconv.Itoa(n) + " node numbers"
}

func parseNodeNumbers(args []string) ([]int, error) {
	nodes := make([]int, 0, len(args))
	for _, a := range args {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 {
			return nil, usageErrorf("node %q: want a node number from 1", a)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

func printFaultResult(w io.Writer, kind string, nodes []int, res lab.FaultResult) {
	switch {
	case kind == "partition" || kind == "heal":
		if len(nodes) == 0 {
			fmt.Fprintf(w, "%s: all nodes\n", kind)
			return
		}
		fmt.Fprintf(w, "%s: nodes %v\n", kind, nodes)
		return
	case res.ClockJump != nil:
		fmt.Fprintf(w, "clock-jump node %d: %d keys' TTLs moved, %d keys expired\n", nodes[0], res.ClockJump.Adjusted, res.ClockJump.Deleted)
		return
	case res.Failover != nil:
		fo := res.Failover
		fmt.Fprintf(w, "failover node %d: %s promoted behind %s", nodes[0], fo.Promoted, res.Status.Addr())
		if fo.Lag > 0 {
			fmt.Fprintf(w, " after holding replication back %v (caught up before: %v)", time.Duration(fo.Lag), fo.CaughtUp)
		}
		fmt.Fprintf(w, "; replication lost %d bytes\n", fo.LostBytes)
		return
	case res.PowerLoss != nil:
		pl := res.PowerLoss
		if pl.Model == lab.PowerLossFilesystem {
			fmt.Fprintf(w, "power-loss node %d (%s, filesystem model): cut %d unsynced bytes from %v", nodes[0], pl.Persistence, pl.CutBytes, pl.CutFiles)
			if len(pl.Vanished)+len(pl.Returned) > 0 {
				fmt.Fprintf(w, ", vanished %v, returned %v", pl.Vanished, pl.Returned)
			}
			fmt.Fprintf(w, "; now %s\n", res.Status.State)
			return
		}
		fmt.Fprintf(w, "power-loss node %d (%s): cut %d bytes, %d writes from the append-only file", nodes[0], pl.Persistence, pl.CutBytes, pl.CutCommands)
		if !pl.KeptUntil.IsZero() {
			fmt.Fprintf(w, " (kept what was written until %s)", pl.KeptUntil.Local().Format("15:04:05.000"))
		}
		fmt.Fprintf(w, "; now %s\n", res.Status.State)
		return
	}
	fmt.Fprintf(w, "%s node %d: now %s", kind, nodes[0], res.Status.State)
	if res.Fault != nil {
		fmt.Fprintf(w, " (fault %s from %s)", res.Fault.ID, res.Fault.Start.Format("15:04:05.000"))
	}
	fmt.Fprintln(w)
}

func listFaults(w io.Writer, l *lab.Lab) error {
	fl, err := l.Faults()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tFAULT\tSTART\tEND\tPARAMS")
	for _, f := range fl {
		end := "active"
		if !f.End.IsZero() {
			end = f.End.Format("15:04:05.000")
		}
		node := strconv.Itoa(f.Node)
		if m := f.Params[faultlog.EtcdMemberParam]; m != "" && f.Node == 0 {
			node = "etcd" + m
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\n", node, f.Kind, f.Start.Format("15:04:05.000"), end, f.Params)
	}
	return tw.Flush()
}

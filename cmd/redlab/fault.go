package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/infra/lab"
)

func init() {
	register(command{name: "fault", summary: "inject a fault into a lab node: kill, restart, pause, partition, latency, clock-jump, ...", run: runFault})
}

const faultUsage = `usage: redlab fault KIND NODE... [flags] [--state-dir ./.redlab]

  kill N                         SIGKILL redis-server; it restarts after the restart delay
  restart N --delay D            the same, but the restart waits D (0: at once)
  stop N / start N               clean shutdown (SIGTERM) / start again
  pause N --for D                SIGSTOP redis-server for D (returns at once)
  partition N...                 the proxy answers nothing: clients time out
  heal [N...]                    remove partitions and latency (all nodes by default)
  latency N --add D [--jitter D] delay every reply by D±jitter (--add 0 removes it)
  clock-jump N --by D            model the node's clock stepping by D: every key's
                                 TTL shortens by D, keys with D or less left expire
                                 (--by=-D steps back: TTLs lengthen)
  clock-rate N --factor F --for D  model a clock running F times real speed for D
  list                           the faults recorded so far (faults.jsonl)

Nodes are numbered from 1. Every fault is recorded with its start and end
time in STATE_DIR/faults.jsonl.
`

// faultSpec describes one fault subcommand's arguments.
type faultSpec struct {
	minNodes, maxNodes int // maxNodes -1: any number
}

var faultSpecs = map[string]faultSpec{
	"kill": {1, 1}, "restart": {1, 1}, "stop": {1, 1}, "start": {1, 1}, "pause": {1, 1},
	"partition": {1, -1}, "heal": {0, -1}, "latency": {1, 1}, "clock-jump": {1, 1},
	"clock-rate": {1, 1}, "list": {0, 0},
}

// faultOptions are every fault's flags; each subcommand requires its own.
type faultOptions struct {
	stateDir    string
	delay       time.Duration
	forD        time.Duration
	add, jitter time.Duration
	by          time.Duration
	factor      float64
	timeout     time.Duration
}

func runFault(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, faultUsage)
		return exitUsage
	}
	kind := args[0]
	if kind == "-h" || kind == "--help" || kind == "help" {
		fmt.Fprint(e.stdout, faultUsage)
		return exitOK
	}
	spec, ok := faultSpecs[kind]
	if !ok {
		fmt.Fprintf(e.stderr, "redlab fault: unknown fault %q\n\n%s", kind, faultUsage)
		return exitUsage
	}
	fs := pflag.NewFlagSet("fault "+kind, pflag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var o faultOptions
	fs.StringVar(&o.stateDir, "state-dir", lab.DefaultStateDir, "the lab's state directory")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up waiting for the node after this long")
	switch kind {
	case "restart":
		fs.DurationVar(&o.delay, "delay", -1, "restart delay override (required; 0 restarts at once)")
	case "pause":
		fs.DurationVar(&o.forD, "for", 0, "how long the node stays paused (required)")
	case "clock-rate":
		fs.DurationVar(&o.forD, "for", 0, "how long the clock runs fast (required)")
		fs.Float64Var(&o.factor, "factor", 0, "clock speed relative to real time, e.g. 1.5 (required)")
	case "latency":
		fs.DurationVar(&o.add, "add", -1, "added delay per reply (required; 0 removes)")
		fs.DurationVar(&o.jitter, "jitter", 0, "± jitter on the added delay")
	case "clock-jump":
		fs.DurationVar(&o.by, "by", 0, "the step (required; negative steps back: --by=-5s)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(e.stderr, "redlab fault %s: %s\n", kind, fmt.Sprintf(format, a...))
		return exitUsage
	}
	var nodes []int
	for _, a := range fs.Args() {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 {
			return usageErr("node %q: want a node number from 1", a)
		}
		nodes = append(nodes, n)
	}
	if len(nodes) < spec.minNodes || (spec.maxNodes >= 0 && len(nodes) > spec.maxNodes) {
		switch {
		case spec.maxNodes == 0:
			return usageErr("takes no node")
		case spec.maxNodes == 1:
			return usageErr("takes exactly one node")
		}
		return usageErr("needs at least one node")
	}
	switch {
	case kind == "restart" && o.delay < 0:
		return usageErr("--delay D (>= 0) is required")
	case (kind == "pause" || kind == "clock-rate") && o.forD <= 0:
		return usageErr("--for D (> 0) is required")
	case kind == "clock-rate" && o.factor <= 0:
		return usageErr("--factor F (> 0) is required")
	case kind == "latency" && o.add < 0:
		return usageErr("--add D (>= 0) is required")
	case kind == "latency" && o.jitter < 0:
		return usageErr("--jitter must be >= 0")
	case kind == "clock-jump" && o.by == 0:
		return usageErr("--by D (non-zero) is required")
	}

	l, err := lab.Open(o.stateDir)
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab fault %s: %v\n", kind, err)
		return exitFailure
	}
	if kind == "list" {
		return listFaults(e, l)
	}
	for _, n := range nodes {
		if n > len(l.Nodes()) {
			return usageErr("no node %d: the lab has nodes 1-%d", n, len(l.Nodes()))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	ctx, cancelSig := cancelOnSignal(ctx, e)
	defer cancelSig()

	var res lab.FaultResult
	switch kind {
	case "kill":
		res, err = l.Kill(ctx, nodes[0])
	case "restart":
		res, err = l.Restart(ctx, nodes[0], o.delay)
	case "stop":
		res, err = l.Stop(ctx, nodes[0])
	case "start":
		res, err = l.Start(ctx, nodes[0])
	case "pause":
		res, err = l.Pause(ctx, nodes[0], o.forD)
	case "partition":
		err = l.Partition(ctx, nodes...)
	case "heal":
		err = l.Heal(ctx, nodes...)
	case "latency":
		res, err = l.Latency(ctx, nodes[0], o.add, o.jitter)
	case "clock-jump":
		res, err = l.ClockJump(ctx, nodes[0], o.by)
	case "clock-rate":
		res, err = l.ClockRate(ctx, nodes[0], o.factor, o.forD)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab fault %s: %v\n", kind, err)
		if errors.Is(err, lab.ErrInvalid) {
			return exitUsage
		}
		return exitFailure
	}
	printFaultResult(e.stdout, kind, nodes, res)
	return exitOK
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
	}
	fmt.Fprintf(w, "%s node %d: now %s", kind, nodes[0], res.Status.State)
	if res.Fault != nil {
		fmt.Fprintf(w, " (fault %s from %s)", res.Fault.ID, res.Fault.Start.Format("15:04:05.000"))
	}
	fmt.Fprintln(w)
}

func listFaults(e *env, l *lab.Lab) int {
	fl, err := l.Faults()
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab fault list: %v\n", err)
		return exitFailure
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tFAULT\tSTART\tEND\tPARAMS")
	for _, f := range fl {
		end := "active"
		if !f.End.IsZero() {
			end = f.End.Format("15:04:05.000")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%v\n", f.Node, f.Kind, f.Start.Format("15:04:05.000"), end, f.Params)
	}
	tw.Flush()
	return exitOK
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
	"github.com/redlocklab/redlocklab/infra/node"
)

// faultOptions are the flags every `redlab fault` subcommand shares.
type faultOptions struct {
	stateDir string
	timeout  time.Duration
	// hosts: the faults go to real hosts over SSH (faulthosts.go).
	hosts faultHostsOptions
}

// Every kind of the catalogue (package fault) that a lab node applies is a
// subcommand, with a flag per parameter and the catalogue's checks: a
// parameter `redlab drill --check` refuses in a spec, this refuses with the
// same rule, before the lab is opened.

// severalNodes are the kinds the CLI applies to several nodes at once (the
// others take one node, and print that node's result).
var severalNodes = map[fault.Kind]bool{fault.Partition: true, fault.Heal: true}

// nodeKinds are the catalogue's kinds a lab node applies, in its order.
func nodeKinds() []fault.Def {
	var out []fault.Def
	for _, d := range fault.Defs() {
		if d.Can(fault.ProcessNode) || d.Can(fault.MachineNode) {
			out = append(out, d)
		}
	}
	return out
}

// cliParams are the parameters of d the CLI takes as flags: all but the
// caller's names; `for` wherever the kind takes it, since the target
// itself ends the fault after it (a partition --for 10s heals on the node).
func cliParams(d fault.Def) []fault.Param {
	var out []fault.Param
	for _, p := range d.AllParams() {
		if p.Type == fault.Names || (p.Name == fault.For && d.For == fault.NoFor) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// faultUse is a kind's usage line: "latency N --add D [--jitter D]".
func faultUse(d fault.Def, target string) string {
	b := strings.Builder{}
	b.WriteString(string(d.Kind))
	switch {
	case d.NodesOptional:
		b.WriteString(" [" + target + "...]")
	case severalNodes[d.Kind]:
		b.WriteString(" " + target + "...")
	default:
		b.WriteString(" " + target)
	}
	for _, p := range cliParams(d) {
		v := "--" + p.Name + " " + paramMeta(p)
		if !p.Required {
			v = "[" + v + "]"
		}
		b.WriteString(" " + v)
	}
	return b.String()
}

func paramMeta(p fault.Param) string {
	switch p.Type {
	case fault.Duration:
		return "D"
	case fault.Int:
		return "N"
	}
	return "F"
}

// paramFlag is one catalogue parameter as a flag: it reads the value with
// the catalogue's Parse into the command's params.
type paramFlag struct {
	kind   fault.Kind
	p      fault.Param
	params fault.Params
}

func (f *paramFlag) String() string {
	v, ok := f.params[f.p.Name]
	switch {
	case !ok:
		return ""
	case f.p.Type == fault.Duration:
		return v.D.String()
	}
	return strconv.FormatFloat(v.N, 'g', -1, 64)
}

func (f *paramFlag) Type() string {
	switch f.p.Type {
	case fault.Duration:
		return "DURATION"
	case fault.Int:
		return "INT"
	}
	return "NUMBER"
}

func (f *paramFlag) Set(s string) error {
	v, err := f.p.Parse(f.kind, s)
	if err != nil {
		var fe *fault.Error
		if errors.As(err, &fe) {
			return errors.New(fe.Rule)
		}
		return err
	}
	f.params[f.p.Name] = v
	return nil
}

// addParamFlags adds d's parameters to fs, read into params.
func addParamFlags(fs *pflag.FlagSet, d fault.Def, params fault.Params) {
	for _, p := range cliParams(d) {
		usage := p.Usage
		if b := p.Bounds(); b != "" {
			usage += "; " + b
		}
		if p.Required {
			usage += " (required)"
		}
		fs.Var(&paramFlag{kind: d.Kind, p: p, params: params}, p.Name, usage)
	}
}

// checkParams validates params as any target of d could take them: what
// needs the lab (a machine, a replica) is checked once it is open.
func checkParams(d fault.Def, params fault.Params) error {
	return validate(d.Kind, params, d.Targets[0], true)
}

// validate is fault.Validate as a usage error that names the parameter by
// its flag: "--by: want a non-zero duration from -24h to 24h, got 0s", the
// rule `redlab drill --check` gives for the same value in a spec.
func validate(kind fault.Kind, params fault.Params, target fault.Target, replicas bool) error {
	err := fault.Validate(kind, params, target, replicas)
	var fe *fault.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe) && fe.Param != "":
		return usageErrorf("--%s: %s", fe.Param, fe.Rule)
	}
	return &exitError{code: exitUsage, err: err}
}

func newFaultCmd(e *env) *cobra.Command {
	o := &faultOptions{}
	c := &cobra.Command{
		Use:   "fault",
		Short: "inject a fault into a lab node: kill, restart, pause, partition, latency, clock-jump, failover, ...",
		Long: `Injects a fault into a node of the lab. Nodes are numbered from 1. Every
fault is recorded with its start and end time in STATE_DIR/faults.jsonl
('redlab fault list' shows them).

With --hosts FILE the fault goes to real hosts of an inventory over SSH
instead (infra/hostfault; hosts are numbered from 1 in the file): each
fault arms a dead-man switch on its host before it injects, and
'redlab heal --hosts FILE' heals whatever is left.`,
	}
	c.PersistentFlags().StringVar(&o.stateDir, "state-dir", "", stateDirUsage)
	c.PersistentFlags().DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up waiting for the node after this long")
	addFaultHostsFlags(c.PersistentFlags(), &o.hosts)
	for _, d := range nodeKinds() {
		c.AddCommand(newFaultKindCmd(e, d, o))
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

func newFaultKindCmd(e *env, d fault.Def, o *faultOptions) *cobra.Command {
	min, max := 1, 1
	switch {
	case d.NodesOptional:
		min, max = 0, -1
	case severalNodes[d.Kind]:
		max = -1
	}
	params := fault.Params{}
	c := &cobra.Command{
		Use:   faultUse(d, "N"),
		Short: d.Summary,
		Args:  hostsOrNodeArgs(&o.hosts, min, max),
	}
	addParamFlags(c.Flags(), d, params)
	c.RunE = func(c *cobra.Command, args []string) error {
		if o.timeout <= 0 {
			return usageErrorf("--timeout must be positive, got %v", o.timeout)
		}
		if err := checkParams(d, params); err != nil {
			return err
		}
		nodes, _ := parseNodeNumbers(args) // nodeArgs accepted them
		if o.hosts.file != "" {
			return runHostsFault(c, e, d, nodes, params, o)
		}
		l, err := lab.Open(stateDir(o.stateDir))
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n > len(l.Nodes()) {
				return usageErrorf("no node %d: the lab has nodes 1-%d", n, len(l.Nodes()))
			}
		}
		target := fault.ProcessNode
		if l.Machines() {
			target = fault.MachineNode
		}
		if err := validate(d.Kind, params, target, l.Replicas() > 0); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
		defer cancel()
		ctx, cancelSig := cancelOnSignal(ctx, e)
		defer cancelSig()
		on := nodes
		if len(on) == 0 { // heal: every node
			for _, n := range l.Nodes() {
				on = append(on, n.ID)
			}
		}
		var res fault.Result
		for _, n := range on {
			if res, err = l.Injector(n).Apply(ctx, d.Kind, params); err != nil {
				break
			}
		}
		if errors.Is(err, lab.ErrInvalid) || errors.Is(err, fault.ErrInvalid) {
			return &exitError{code: exitUsage, err: err}
		}
		if err != nil {
			return err
		}
		printFaultResult(e.stdout, c.Name(), nodes, l.Nodes()[on[0]-1].Addr, res, crashDelay(l, d.Kind, params))
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
			return usageErrorf("takes no node, got %s", strings.Join(args, " "))
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

// printFaultResult says what a fault did on nodes, the first of which has
// its front at addr, and what state it left the node in; delay is how long
// its restart guard holds a crashed node down.
func printFaultResult(w io.Writer, kind string, nodes []int, addr string, res fault.Result, delay time.Duration) {
	switch {
	case kind == "partition" || kind == "heal":
		if len(nodes) == 0 {
			fmt.Fprintf(w, "%s: all nodes\n", kind)
			return
		}
		fmt.Fprintf(w, "%s: nodes %s\n", kind, intList(nodes))
		return
	case res.ClockJump != nil:
		fmt.Fprintf(w, "clock-jump node %d: %d keys' TTLs moved, %d keys expired\n", nodes[0], res.ClockJump.Adjusted, res.ClockJump.Deleted)
		return
	case res.Failover != nil:
		fo := res.Failover
		fmt.Fprintf(w, "failover node %d: %s promoted behind %s", nodes[0], fo.Promoted, addr)
		if fo.Lag > 0 {
			fmt.Fprintf(w, " after holding replication back %v (caught up before: %v)", fo.Lag, fo.CaughtUp)
		}
		fmt.Fprintf(w, "; replication lost %d bytes\n", fo.LostBytes)
		return
	case res.PowerLoss != nil:
		pl := res.PowerLoss
		fmt.Fprintf(w, "power-loss node %d (%s, %s model): cut %d unsynced bytes, %d acknowledged writes from %s", nodes[0], pl.Persistence, pl.Model, pl.CutBytes, pl.CutCommands, listOrNone(pl.CutFiles))
		if len(pl.Vanished)+len(pl.Returned) > 0 {
			fmt.Fprintf(w, ", vanished %s, returned %s", listOrNone(pl.Vanished), listOrNone(pl.Returned))
		}
		fmt.Fprintf(w, "; %s\n", stateText(node.State(res.State), "Redis", delay))
		return
	}
	fmt.Fprintf(w, "%s node %d: %s", kind, nodes[0], stateText(node.State(res.State), "Redis", delay))
	if res.ID != "" {
		fmt.Fprintf(w, " (fault %s from %s)", res.ID, res.Start.Format("15:04:05.000"))
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", node, f.Kind, f.Start.Format("15:04:05.000"), end, paramList(f.Params))
	}
	return tw.Flush()
}

// intList writes numbers as people do: "2", "1, 3".
func intList(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// listOrNone is "a, b", or "none".
func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// paramList writes a fault's parameters as the flags give them, in name
// order: "add=200ms jitter=0s", or "-" for none.
func paramList(p map[string]string) string {
	if len(p) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + p[k]
	}
	return strings.Join(keys, " ")
}

// crashDelay is how long the restart guard holds a node or member down
// after the fault: restart's own delay, else the lab's.
func crashDelay(l *lab.Lab, kind fault.Kind, params fault.Params) time.Duration {
	switch {
	case kind == fault.Restart:
		return params.D("delay")
	case l.NoRestartDelay():
		return 0
	}
	return l.RestartDelay()
}

// stateText says in words what the state of a node or member (the server
// is Redis or etcd) after a fault means.
func stateText(st node.State, server string, delay time.Duration) string {
	switch st {
	case node.Waiting:
		return fmt.Sprintf("down; its restart guard holds %s back for the %v restart delay, as after a crash in production", server, delay)
	case node.Starting:
		return "restarting"
	case node.Stopped:
		return "stopped, until redlab fault start"
	case node.Down:
		return "down: its supervisor is not running"
	}
	return string(st) // up, paused
}

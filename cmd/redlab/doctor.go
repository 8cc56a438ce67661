package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/redlock"
)

func init() {
	register(command{name: "doctor", summary: "audit Redis nodes against the Redlock practices", run: runDoctor})
}

// doctorOptions are the parsed flags of `redlab doctor`.
type doctorOptions struct {
	nodes    []string
	ttl      time.Duration
	timeout  time.Duration
	username string
	password string
}

func parseDoctor(e *env, args []string) (doctorOptions, error) {
	fs := pflag.NewFlagSet("doctor", pflag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var (
		nodes nodesFlag
		o     doctorOptions
	)
	fs.Var(&nodes, "nodes", "Redis nodes to audit, host:port[,host:port...] (default $REDLAB_NODES)")
	fs.DurationVar(&o.ttl, "ttl", redlock.DefaultCheckTTL, "lock TTL in use, to judge the client timeouts against")
	fs.DurationVar(&o.timeout, "timeout", redlock.DefaultNodeTimeout, "per-node dial/read/write timeout of the lock client")
	fs.StringVar(&o.username, "username", "", "ACL user to connect as, e.g. the nodes' read-only monitor user; the password is read from $REDLAB_PASSWORD")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: redlab doctor --nodes ADDR[,ADDR...] [--ttl 10s] [--timeout 50ms] [--username monitor]")
		fmt.Fprintln(e.stderr, "\nAudits every node (persistence, eviction, replication, run_id, clock, timeouts).")
		fmt.Fprintln(e.stderr, "Exit 0 when no finding is critical, 1 otherwise, 2 on a usage error.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	addrs, err := nodes.orEnv()
	if err != nil {
		return o, err
	}
	o.nodes = addrs
	// The password never goes on the command line, where ps would show it.
	o.password = os.Getenv("REDLAB_PASSWORD")
	if o.username != "" && o.password == "" {
		return o, fmt.Errorf("--username %s needs the password in $REDLAB_PASSWORD", o.username)
	}
	if o.ttl <= 0 {
		return o, fmt.Errorf("--ttl must be positive, got %v", o.ttl)
	}
	if o.timeout <= 0 {
		return o, fmt.Errorf("--timeout must be positive, got %v", o.timeout)
	}
	return o, nil
}

func runDoctor(ctx context.Context, e *env, args []string) int {
	o, err := parseDoctor(e, args)
	if errors.Is(err, pflag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab doctor: %v\n", err)
		return exitUsage
	}

	nopts := []redlock.NodeOption{redlock.WithNodeTimeout(o.timeout)}
	if o.username != "" || o.password != "" {
		nopts = append(nopts, redlock.WithAuth(o.username, o.password))
	}
	nodes := redlock.NewNodes(o.nodes, nopts...)
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	c, err := redlock.New(nodes)
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab doctor: %v\n", err)
		return exitFailure
	}
	defer c.Close()
	rep, err := c.Check(ctx, redlock.WithTTL(o.ttl))
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab doctor: %v\n", err)
		return exitFailure
	}
	printReport(e.stdout, rep)
	if rep.Critical() {
		return exitFailure
	}
	return exitOK
}

// printReport writes the findings as an aligned table, then a summary line.
func printReport(w io.Writer, rep redlock.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tCHECK\tSEVERITY\tMESSAGE\tFIX")
	var count [3]int
	for _, f := range rep.Findings {
		node := "all"
		if f.Node >= 0 && f.Node < len(rep.Nodes) {
			node = strconv.Itoa(f.Node+1) + " " + rep.Nodes[f.Node].Addr // numbered from 1, as in every command
		}
		fix := f.Fix
		if fix == "" {
			fix = "-"
		}
		if int(f.Severity) < len(count) {
			count[f.Severity]++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", node, f.Check, f.Severity, f.Message, fix)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d nodes: %d critical, %d warning, %d ok\n",
		len(rep.Nodes), count[redlock.Critical], count[redlock.Warning], count[redlock.Info])
}

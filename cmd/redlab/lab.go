package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/infra/lab"
)

func init() {
	register(command{name: "lab", summary: "the local lab: up | status | down (OpenTofu/Terraform + supervised nodes)", run: runLab})
}

const labUsage = `usage:
  redlab lab up     [--count 5] [--base-port 7100] [--persistence always|everysec|none]
                    [--restart-delay 5s] [--state-dir ./.redlab] [--infra-dir DIR] [--verbose]
      create the lab, or bring an existing one in line (flags not given keep
      the existing lab's values). Prints the nodes; the last line is
      REDLAB_NODES=host:port,... (eval it, or pass it to --nodes).
  redlab lab status [--state-dir DIR]
  redlab lab down   [--state-dir DIR] [--verbose]
      destroy the lab: no process, port or file of it is left.

Node N's proxy (what clients use) is 127.0.0.1:base+N, its redis-server
127.0.0.1:base+100+N, its control endpoint 127.0.0.1:base+200+N.
The tofu/terraform binary: $REDLAB_TF, else tofu, else terraform on PATH,
else ./bin/tofu (make tools).
`

func runLab(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, labUsage)
		return exitUsage
	}
	switch args[0] {
	case "up":
		return runLabUp(ctx, e, args[1:])
	case "status":
		return runLabStatus(ctx, e, args[1:])
	case "down":
		return runLabDown(ctx, e, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(e.stdout, labUsage)
		return exitOK
	}
	fmt.Fprintf(e.stderr, "redlab lab: unknown subcommand %q\n\n%s", args[0], labUsage)
	return exitUsage
}

// persistenceFlag is a pflag.Value for always|everysec|none.
type persistenceFlag lab.Persistence

func (f *persistenceFlag) String() string { return string(*f) }

func (f *persistenceFlag) Type() string { return "always|everysec|none" }

func (f *persistenceFlag) Set(s string) error {
	p, err := lab.ParsePersistence(s)
	if err != nil {
		return err
	}
	*f = persistenceFlag(p)
	return nil
}

// cancelOnSignal returns a context cancelled by the first signal: tofu gets
// SIGINT and stops cleanly.
func cancelOnSignal(ctx context.Context, e *env) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-e.signals:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func runLabUp(ctx context.Context, e *env, args []string) int {
	fs := pflag.NewFlagSet("lab up", pflag.ContinueOnError)
	fs.SetOutput(e.stderr)
	cfg := lab.Config{Persistence: lab.PersistAlways}
	fs.IntVar(&cfg.Count, "count", lab.DefaultCount, "nodes")
	fs.IntVar(&cfg.BasePort, "base-port", lab.DefaultBasePort, "node N listens on base+N (proxy), base+100+N (redis), base+200+N (control)")
	fs.Var((*persistenceFlag)(&cfg.Persistence), "persistence", "always | everysec | none")
	fs.DurationVar(&cfg.RestartDelay, "restart-delay", lab.DefaultRestartDelay, "how long a crashed node stays down (= the max lock TTL)")
	fs.StringVar(&cfg.StateDir, "state-dir", lab.DefaultStateDir, "state directory")
	fs.StringVar(&cfg.InfraDir, "infra-dir", "", "the repository's infra directory (default: found from the current directory)")
	verbose := fs.BoolP("verbose", "v", false, "show tofu/terraform output")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "redlab lab up: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	// An existing lab keeps what the flags do not change.
	if old, err := lab.Open(cfg.StateDir); err == nil {
		if !fs.Changed("count") {
			cfg.Count = len(old.Nodes())
		}
		if !fs.Changed("persistence") {
			cfg.Persistence = old.Persistence()
		}
		if !fs.Changed("restart-delay") {
			cfg.RestartDelay = old.RestartDelay()
		}
		if !fs.Changed("base-port") {
			cfg.BasePort = old.BasePort()
		}
	}
	if cfg.Count < 1 || cfg.Count > lab.MaxNodes {
		fmt.Fprintf(e.stderr, "redlab lab up: --count %d: want 1-%d\n", cfg.Count, lab.MaxNodes)
		return exitUsage
	}
	if cfg.RestartDelay <= 0 {
		fmt.Fprintln(e.stderr, "redlab lab up: --restart-delay must be > 0 (it is the max lock TTL)")
		return exitUsage
	}
	if *verbose {
		cfg.Log = e.stderr
	}
	ctx, cancel := cancelOnSignal(ctx, e)
	defer cancel()
	start := time.Now()
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab lab up: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(e.stdout, "lab up in %v: %d nodes, persistence %s, restart delay %v, state %s\n",
		time.Since(start).Round(time.Millisecond), len(l.Nodes()), l.Persistence(), l.RestartDelay(), l.StateDir())
	for _, n := range l.Nodes() {
		fmt.Fprintf(e.stdout, "  node %d  %s  (redis %s, control %s)\n", n.ID, n.Addr, n.RedisAddr, n.Control)
	}
	fmt.Fprintf(e.stdout, "REDLAB_NODES=%s\n", strings.Join(l.Addrs(), ","))
	return exitOK
}

func runLabStatus(ctx context.Context, e *env, args []string) int {
	fs := pflag.NewFlagSet("lab status", pflag.ContinueOnError)
	fs.SetOutput(e.stderr)
	stateDir := fs.String("state-dir", lab.DefaultStateDir, "state directory")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "redlab lab status: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	l, err := lab.Open(*stateDir)
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab lab status: %v\n", err)
		return exitFailure
	}
	sts, err := l.Status(ctx)
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab lab status: %v\n", err)
		return exitFailure
	}
	printLabStatus(e.stdout, l, sts)
	return exitOK
}

func printLabStatus(w io.Writer, l *lab.Lab, sts []lab.NodeStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tADDR\tREDIS PID\tSUPERVISOR PID\tRESTARTS\tPERSISTENCE\tNETWORK\tSINCE")
	for _, st := range sts {
		network := "ok"
		switch {
		case st.Partitioned:
			network = "partitioned"
		case st.Latency > 0:
			network = fmt.Sprintf("+%v±%v", time.Duration(st.Latency), time.Duration(st.Jitter))
		}
		since := "-"
		if !st.Since.IsZero() {
			since = st.Since.Format("15:04:05")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", st.ID, st.State, st.Addr(),
			pidOrDash(st.RedisPID), pidOrDash(st.SupervisorPID), st.Restarts, st.Persistence, network, since)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nrestart delay %v. Power-loss fidelity: %s\n", l.RestartDelay(), l.Persistence().KillNote())
}

func pidOrDash(pid int) string {
	if pid == 0 {
		return "-"
	}
	return fmt.Sprint(pid)
}

func runLabDown(ctx context.Context, e *env, args []string) int {
	fs := pflag.NewFlagSet("lab down", pflag.ContinueOnError)
	fs.SetOutput(e.stderr)
	cfg := lab.Config{}
	fs.StringVar(&cfg.StateDir, "state-dir", lab.DefaultStateDir, "state directory")
	verbose := fs.BoolP("verbose", "v", false, "show tofu/terraform output")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "redlab lab down: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if *verbose {
		cfg.Log = e.stderr
	}
	ctx, cancel := cancelOnSignal(ctx, e)
	defer cancel()
	if err := lab.Down(ctx, cfg); err != nil {
		fmt.Fprintf(e.stderr, "redlab lab down: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(e.stdout, "lab down: %s is clear\n", cfg.StateDir)
	return exitOK
}

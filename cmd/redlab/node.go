package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/infra/lab"
)

func init() {
	register(command{name: "node", summary: "one lab node's supervisor: start | run | stop (run by infra/envs/local)", run: runNode})
}

const nodeUsage = `usage:
  redlab node start --id N --state-dir DIR [--port P --redis-port RP [--control-port CP]
                    --conf-b64 B64 --guard-b64 B64 [--restart-delay D] [--redis-server PATH]]
      write the node's files and start its supervisor detached; returns once
      the node answers through its proxy. Without --conf-b64 the files already
      in DIR/nodeN are used (restarting a supervisor that died).
  redlab node run   (same flags)   the supervisor itself, in the foreground
  redlab node stop  --id N --state-dir DIR [--purge]
      stop the supervisor (redis-server cleanly), and anything it left;
      --purge removes DIR/nodeN.
`

func runNode(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, nodeUsage)
		return exitUsage
	}
	switch args[0] {
	case "start", "run":
		return runNodeStartOrRun(ctx, e, args[0], args[1:])
	case "stop":
		return runNodeStop(ctx, e, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(e.stdout, nodeUsage)
		return exitOK
	}
	fmt.Fprintf(e.stderr, "redlab node: unknown subcommand %q\n\n%s", args[0], nodeUsage)
	return exitUsage
}

// nodeOptions are the flags of `node start` and `node run`.
type nodeOptions struct {
	id                           int
	stateDir                     string
	port, redisPort, controlPort int
	restartDelay                 time.Duration
	redisServer                  string
	confB64, guardB64            string
}

func (o *nodeOptions) flags(fs *pflag.FlagSet) {
	fs.IntVar(&o.id, "id", 0, "node number, from 1")
	fs.StringVar(&o.stateDir, "state-dir", "", "the lab's state directory")
	fs.IntVar(&o.port, "port", 0, "proxy port (what clients use)")
	fs.IntVar(&o.redisPort, "redis-port", 0, "redis-server's private port")
	fs.IntVar(&o.controlPort, "control-port", 0, "control endpoint port (default port+200)")
	fs.DurationVar(&o.restartDelay, "restart-delay", 0, "the restart guard's delay (for start timeouts)")
	fs.StringVar(&o.redisServer, "redis-server", "", "redis-server binary (default: redis-server on PATH)")
	fs.StringVar(&o.confB64, "conf-b64", "", "rendered redis.conf, base64")
	fs.StringVar(&o.guardB64, "guard-b64", "", "rendered restart guard script, base64")
}

// spec validates the flags. full=false means: resume from the files on disk.
func (o *nodeOptions) spec() (spec lab.NodeSpec, full bool, err error) {
	if o.id < 1 {
		return spec, false, errors.New("--id N (from 1) is required")
	}
	if o.stateDir == "" {
		return spec, false, errors.New("--state-dir is required")
	}
	dir, err := filepath.Abs(o.stateDir)
	if err != nil {
		return spec, false, err
	}
	if o.confB64 == "" && o.guardB64 == "" {
		return lab.NodeSpec{ID: o.id, StateDir: dir}, false, nil
	}
	conf, err := base64.StdEncoding.DecodeString(o.confB64)
	if err != nil {
		return spec, false, fmt.Errorf("--conf-b64: %w", err)
	}
	guard, err := base64.StdEncoding.DecodeString(o.guardB64)
	if err != nil {
		return spec, false, fmt.Errorf("--guard-b64: %w", err)
	}
	if o.controlPort == 0 && o.port > 0 {
		o.controlPort = o.port + 200
	}
	spec = lab.NodeSpec{
		ID: o.id, StateDir: dir, Port: o.port, RedisPort: o.redisPort, ControlPort: o.controlPort,
		RestartDelay: lab.Duration(o.restartDelay), RedisServer: o.redisServer, Conf: conf, Guard: guard,
	}
	return spec, true, spec.Validate()
}

// quietRedis drops go-redis' own log lines: while a node starts, every
// refused dial would be logged, burying the one error that matters.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func runNodeStartOrRun(ctx context.Context, e *env, sub string, args []string) int {
	redis.SetLogger(quietRedis{})
	fs := pflag.NewFlagSet("node "+sub, pflag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var o nodeOptions
	o.flags(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "redlab node %s: unexpected arguments %q\n", sub, fs.Args())
		return exitUsage
	}
	spec, full, err := o.spec()
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab node %s: %v\n", sub, err)
		return exitUsage
	}
	if full {
		if err := lab.PrepareNode(spec); err != nil {
			fmt.Fprintf(e.stderr, "redlab node %s: %v\n", sub, err)
			return exitFailure
		}
	}
	if sub == "start" {
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintf(e.stderr, "redlab node start: %v\n", err)
			return exitFailure
		}
		if err := lab.StartNode(ctx, self, spec.StateDir, spec.ID); err != nil {
			fmt.Fprintf(e.stderr, "redlab node start: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(e.stdout, "node %d up\n", spec.ID)
		return exitOK
	}
	ctx, cancel := cancelOnSignal(ctx, e)
	defer cancel()
	if err := lab.RunNode(ctx, spec.StateDir, spec.ID, e.stdout); err != nil {
		fmt.Fprintf(e.stderr, "redlab node run: %v\n", err)
		return exitFailure
	}
	return exitOK
}

func runNodeStop(ctx context.Context, e *env, args []string) int {
	fs := pflag.NewFlagSet("node stop", pflag.ContinueOnError)
	fs.SetOutput(e.stderr)
	id := fs.Int("id", 0, "node number, from 1")
	stateDir := fs.String("state-dir", "", "the lab's state directory")
	purge := fs.Bool("purge", false, "remove the node's directory afterwards")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *id < 1 || *stateDir == "" || fs.NArg() > 0 {
		fmt.Fprintln(e.stderr, "redlab node stop: --id N (from 1) and --state-dir DIR are required, nothing else")
		return exitUsage
	}
	dir, err := filepath.Abs(*stateDir)
	if err != nil {
		fmt.Fprintf(e.stderr, "redlab node stop: %v\n", err)
		return exitUsage
	}
	if err := lab.StopNode(ctx, dir, *id, *purge); err != nil {
		fmt.Fprintf(e.stderr, "redlab node stop: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(e.stdout, "node %d stopped\n", *id)
	return exitOK
}

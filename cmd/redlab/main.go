// Command redlab is the redlock-lab binary: one executable, one file per
// subcommand. Commands only parse flags and call packages.
//
// Exit codes: 0 ok, 1 failure, 2 usage error, 3 invalid or inconclusive,
// 99 thresholds failed.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/redis/go-redis/v9/logging"
	"github.com/spf13/cobra"
)

// subcommands are the constructors of redlab's top-level commands. Adding a
// command is one file with a constructor, listed here.
var subcommands = []func(*env) *cobra.Command{
	newLabCmd,
	newNodeCmd,
	newFaultCmd,
	newHostsCmd,
	newHealCmd,
	newServeCmd,
	newLoadCmd,
	newSweepCmd,
	newReportCmd,
	newMergeCmd,
	newDoctorCmd,
	newDrillCmd,
	newExploreCmd,
	newPlanCmd,
	newVersionCmd,
}

// Exit codes shared by every subcommand.
const (
	exitOK        = 0
	exitFailure   = 1
	exitUsage     = 2
	exitInvalid   = 3
	exitThreshold = 99
)

const rootLong = `redlab runs the Redlock lab: a local set of supervised Redis nodes, faults
injected into them, an inventory service guarded by a lock, open-loop load
against it with latency and safety reports, and an audit of the nodes.

A typical session:
  eval "$(redlab lab up | tail -1)"   # start 5 nodes, export REDLAB_NODES
  redlab doctor                       # and REDLAB_STATE_DIR; audit the nodes
  redlab load --rate 500 --duration 30s --threshold 'acquire.p99<20ms'
  redlab fault kill 2
  redlab lab down

Exit codes (every command):
  0   ok
  1   failure (the reason is on stderr)
  2   usage error: a bad flag, argument or command
  3   invalid or inconclusive: the host could not keep a drill's schedule
      (drill), or a search never reached what its faults should (explore)
  99  thresholds failed (load, merge, report) or no rate met the SLO (sweep)`

// env is what a command may touch of the outside world.
type env struct {
	stdout, stderr io.Writer
	// signals delivers SIGINT/SIGTERM; a command that drains work on the first
	// one reads from it, the second one ends the command at once.
	signals <-chan os.Signal
	// args is the whole command line after "redlab", as run.json records it.
	args []string
}

func main() {
	os.Exit(run(context.Background(), &env{stdout: os.Stdout, stderr: os.Stderr, signals: notifySignals()}, os.Args[1:]))
}

// run executes one command line and returns its exit code. Every non-zero
// code comes with a line on stderr that says why.
func run(ctx context.Context, e *env, args []string) int {
	// go-redis logs every failed dial of its pools, a dozen lines per dead
	// node; the commands report node failures themselves, once, in context.
	logging.Disable()
	e = &env{stdout: e.stdout, stderr: e.stderr, signals: e.signals, args: args}
	root := newRoot(e)
	root.SetArgs(append([]string{}, args...)) // never nil: cobra would read os.Args
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	if cmd == nil {
		cmd = root
	}
	code := exitUsage // what cobra returns itself: flags, arguments, commands
	var xe *exitError
	if errors.As(err, &xe) {
		code = xe.code
	}
	fmt.Fprintf(e.stderr, "%s: %v\n", cmd.CommandPath(), err)
	if code == exitUsage {
		fmt.Fprintf(e.stderr, "see '%s --help'\n", cmd.CommandPath())
	}
	return code
}

// exitError is an error with the exit code it ends the process with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErrorf is a usage error (exit 2): the command line is wrong and
// nothing was started.
func usageErrorf(format string, a ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

// thresholdErrorf ends a run whose thresholds failed (exit 99).
func thresholdErrorf(format string, a ...any) error {
	return &exitError{code: exitThreshold, err: fmt.Errorf(format, a...)}
}

// newRoot builds the whole command tree for one run.
func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:           "redlab",
		Short:         "the Redlock lab: nodes, faults, load, reports and audits",
		Long:          rootLong,
		Version:       buildVersion().String(),
		SilenceErrors: true, // run prints the error once, with the hint
		SilenceUsage:  true,
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: err}
	})
	for _, newCmd := range subcommands {
		root.AddCommand(newCmd(e))
	}
	root.SetHelpCommand(newHelpCmd())
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd() // now, not at Execute, so that wire reaches it
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Short = "generate the shell completion script: bash, zsh, fish or powershell"
		}
	}
	wire(root)
	return root
}

// wire gives every command of the tree the same behaviour: a group called
// without (or with an unknown) subcommand is a usage error rather than help
// with exit 0; a command that declares no positional arguments takes none;
// an error from a command's own run is a failure (exit 1) unless it carries
// its own code.
func wire(c *cobra.Command) {
	switch {
	case c.HasSubCommands() && !c.Runnable():
		c.Args, c.RunE = cobra.ArbitraryArgs, runGroup
	case c.Args == nil:
		c.Args = noArgs
	}
	if runE := c.RunE; runE != nil {
		c.RunE = func(c *cobra.Command, args []string) error {
			err := runE(c, args)
			var xe *exitError
			if err != nil && !errors.As(err, &xe) {
				return &exitError{code: exitFailure, err: err}
			}
			return err
		}
	}
	for _, sub := range c.Commands() {
		wire(sub)
	}
}

// runGroup is the run of a command that only holds subcommands.
func runGroup(c *cobra.Command, args []string) error {
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	if len(args) == 0 {
		return usageErrorf("missing command: one of %s", strings.Join(names, ", "))
	}
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's default, which only its own lookup sets
	}
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		return usageErrorf("unknown command %q: did you mean %s?", args[0], s[0])
	}
	return usageErrorf("unknown command %q: one of %s", args[0], strings.Join(names, ", "))
}

// noArgs refuses positional arguments.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unexpected arguments: %s", strings.Join(args, " "))
	}
	return nil
}

// newHelpCmd replaces cobra's help command, which answers an unknown topic
// with exit 0.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "help about any command",
		Args:  cobra.ArbitraryArgs,
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					out = append(out, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return usageErrorf("unknown command %q", strings.Join(args, " "))
			}
			// As at Execute, so that the help lists the same flags as --help.
			cmd.InitDefaultHelpFlag()
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	}
}

// Command redlab is the redlock-lab binary: one executable, one file per
// subcommand. Commands only parse flags and call packages.
//
// Exit codes: 0 ok, 1 failure, 2 usage error, 99 thresholds failed.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// Exit codes shared by every subcommand.
const (
	exitOK        = 0
	exitFailure   = 1
	exitUsage     = 2
	exitThreshold = 99
)

// command is one subcommand. run gets the arguments after the subcommand name
// and the signal channel, so shutdown is testable.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) int
}

// env is what a command may touch of the outside world.
type env struct {
	stdout, stderr io.Writer
	// signals delivers SIGINT/SIGTERM; a command that drains work on the first
	// one reads from it, the second one ends the process via main.
	signals <-chan os.Signal
}

var commands = map[string]command{}

// register is called from each subcommand file's init.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("redlab: duplicate command " + c.name)
	}
	commands[c.name] = c
}

func main() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	os.Exit(run(context.Background(), &env{stdout: os.Stdout, stderr: os.Stderr, signals: sigs}, os.Args[1:]))
}

func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(e.stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "redlab: unknown command %q\n\n", args[0])
		usage(e.stderr)
		return exitUsage
	}
	return c.run(ctx, e, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: redlab COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nexit codes: 0 ok, 1 failure, 2 usage error, 99 thresholds failed")
}

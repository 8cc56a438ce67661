package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// notifySignals delivers the process' SIGINT and SIGTERM. Commands get the
// channel through env, so tests drive shutdown with their own.
func notifySignals() <-chan os.Signal {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	return sigs
}

// cancelOnSignal returns a context cancelled by the first signal: tofu gets
// SIGINT and stops cleanly, a supervisor stops its node.
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

// interruptible runs fn with a stop channel that the first SIGINT/SIGTERM
// closes (stop scheduling, drain, report). The second cancels fn's context
// and returns at once, waiting at most two seconds for fn to notice.
func interruptible(ctx context.Context, e *env, name string, fn func(ctx context.Context, stop <-chan struct{}) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- fn(ctx, stop) }()
	stopped := false
	for {
		select {
		case err := <-done:
			return err
		case <-e.signals:
			if !stopped {
				stopped = true
				close(stop)
				fmt.Fprintf(e.stderr, "\nredlab %s: interrupted: stopping the schedule, draining in-flight operations, writing the report (interrupt again to abort)\n", name)
				continue
			}
			cancel()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
			}
			return fmt.Errorf("interrupted twice: aborted without a report")
		}
	}
}

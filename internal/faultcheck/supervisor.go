package faultcheck

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// Guard behaves like the rendered restart guard, reduced to its rule:
// pre-start waits REDIS_GUARD_DELAY (default 1s) unless the last stop was
// clean, then records running; post-stop records clean only after running.
const Guard = `#!/bin/bash
set -eu
state="$(dirname "$0")/guard-state"
last="$(cat "$state" 2>/dev/null || echo none)"
case "$1" in
pre-start)
	if [ "$last" != clean ]; then sleep "${REDIS_GUARD_DELAY:-1}"; fi
	echo running >"$state" ;;
post-stop)
	if [ "$2" = unclean ] || [ "$last" = running ]; then echo "$2" >"$state"; fi ;;
esac
`

// GuardDelay is how long Guard holds a restart after an unclean stop.
const GuardDelay = time.Second

// SyncBuffer is a bytes.Buffer safe for the supervisor's goroutines.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// PrepareNode writes node 1 of a lab in state directory dir, run by Guard,
// with extra (persistence settings, ACL users) in its redis.conf.
func PrepareNode(t *testing.T, dir, extra string) node.Spec {
	t.Helper()
	bin := testenv.Require(t, "redis-server")
	spec := node.Spec{
		ID: 1, StateDir: dir,
		Port: redlocktest.FreePort(t), RedisPort: redlocktest.FreePort(t), ControlPort: redlocktest.FreePort(t),
		RestartDelay: node.Duration(GuardDelay), RedisServer: bin, Guard: []byte(Guard),
	}
	nd := node.Dir(dir, 1)
	spec.Conf = fmt.Appendf(nil, "bind 127.0.0.1\nport %d\ndaemonize no\ndir %s/data\nlogfile %q\n%ssave \"\"\nmaxmemory-policy noeviction\n",
		spec.RedisPort, nd, nd+"/redis.log", extra)
	if err := node.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

// RunSupervisor runs node.Run for spec in this process (under the race
// detector, when the test has it) and returns once the node is up. The
// supervisor is stopped at cleanup, and its log shown if the test failed.
func RunSupervisor(t *testing.T, spec node.Spec) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &SyncBuffer{}
	done := make(chan error, 1)
	go func() { done <- node.Run(ctx, spec.StateDir, spec.ID, logs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node.Run: %v", err)
		}
		if t.Failed() {
			t.Logf("supervisor log:\n%s", logs.String())
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if err := node.WaitUp(wctx, spec, os.Getpid()); err != nil {
		t.Fatalf("%v\nlog:\n%s", err, logs.String())
	}
}

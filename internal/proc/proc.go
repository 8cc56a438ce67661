// Package proc reads what Linux says about a process in /proc: whether it
// is alive and its scheduler state.
package proc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// State is pid's state letter from /proc/PID/stat: R (running), S
// (sleeping), D (disk wait), T (stopped by a signal), Z (zombie), …
func State(pid int) (byte, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("proc: pid %d", pid)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("proc: %w", err)
	}
	// "pid (comm) state …": comm may hold spaces and parentheses, so the
	// state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("proc: /proc/%d/stat: unexpected %q", pid, b)
	}
	return b[i+2], nil
}

// Alive reports whether pid is a process that has not exited. A zombie
// (state Z, or X while it is reaped) is not alive: it has exited and only
// waits for its parent to collect its status, and where PID 1 does not reap
// orphans (some containers) an exited daemon stays a zombie for good. A
// process stopped by a signal is alive.
func Alive(pid int) bool {
	s, err := State(pid)
	return err == nil && s != 'Z' && s != 'X'
}

// WaitGone polls until pid is no longer alive (see Alive), limit passes or
// ctx ends, and reports whether it is gone.
func WaitGone(ctx context.Context, pid int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for Alive(pid) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// Cmdline returns a process's argv, or nil when it cannot be read (the
// process is gone, or is a kernel thread).
func Cmdline(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// Scan returns the live processes other than this one for which match
// returns true.
func Scan(match func(pid int) bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if match(pid) && Alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

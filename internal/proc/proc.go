// Package proc reads what Linux says about a process in /proc: whether it
// is alive, its scheduler state and its start time.
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
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	return f[0][0], nil
}

// StartTime is when pid started, in clock ticks after boot (field 22 of
// /proc/PID/stat). A pid and its start time name one process: a pid the
// kernel gives again to a new process comes with a later start time.
func StartTime(pid int) (uint64, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	// f[0] is field 3 (the state).
	if len(f) < 20 {
		return 0, fmt.Errorf("proc: /proc/%d/stat: %d fields, want at least 22", pid, len(f)+2)
	}
	t, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc: /proc/%d/stat: start time: %w", pid, err)
	}
	return t, nil
}

// statFields are the fields of /proc/PID/stat from the third (the state)
// on.
func statFields(pid int) ([][]byte, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("proc: pid %d", pid)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, fmt.Errorf("proc: %w", err)
	}
	// "pid (comm) state …": comm may hold spaces and parentheses, so the
	// state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return nil, fmt.Errorf("proc: /proc/%d/stat: unexpected %q", pid, b)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) == 0 || len(f[0]) != 1 {
		return nil, fmt.Errorf("proc: /proc/%d/stat: unexpected %q", pid, b)
	}
	return f, nil
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

// Threads describes what each of pid's threads is doing, for an error
// about a process that stopped answering: "tid state wchan" per thread
// (wchan, the kernel function it sleeps in, needs root to read).
func Threads(pid int) string {
	dirs, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, d := range dirs {
		tid := d.Name()
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, tid))
		state := "?"
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
			state = string(stat[i+2])
		}
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/wchan", pid, tid))
		fmt.Fprintf(&b, "%s %s %s; ", tid, state, wchan)
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// Package proc reads what Linux says about a process in /proc: whether it
// is alive and its scheduler state.
package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
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

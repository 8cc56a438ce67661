package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process helpers for the monitoring processes the lab starts (Prometheus,
// the exporters). The node supervisors have their own (package node).

// waitGone polls until pid is dead or limit passes.
func waitGone(pid int, limit time.Duration) bool {
	return waitGoneCtx(context.Background(), pid, limit)
}

// waitGoneCtx is waitGone that also gives up when ctx ends.
func waitGoneCtx(ctx context.Context, pid int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for alive(pid) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// alive reports whether pid is a live process. A zombie is dead: where PID 1
// does not reap orphans (some containers) an exited daemon stays a zombie.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Field 3 follows the parenthesised command name, which may hold spaces.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z' && b[i+2] != 'X'
	}
	return true
}

// cmdline returns a process's argv.
func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

func scanProc(match func(pid int) bool) []int {
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
		if match(pid) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

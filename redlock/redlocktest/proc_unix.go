//go:build unix && !linux

package redlocktest

import "syscall"

// sysProcAttr puts a node in its own process group, so that a signal meant
// for the test binary does not reach it and it can be stopped as a group.
// Only Linux can also tie the node's life to the test process's.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

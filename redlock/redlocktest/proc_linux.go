package redlocktest

import "syscall"

// sysProcAttr puts a node in its own process group, so that a signal meant
// for the test binary does not reach it and it can be stopped as a group,
// and has the kernel kill it when the test process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

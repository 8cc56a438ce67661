package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/internal/proc"
)

// A supervisor from outside, for either daemon (a node's, Start and Stop;
// an etcd member's, StartEtcdMember and StopEtcdMember): started detached,
// awaited until its daemon runs, stopped, and what a dead one left swept.

// nodeDaemon and etcdDaemon name the two daemons, for their supervisors
// and for the functions that start and stop them.
func nodeDaemon(stateDir string, id int) daemonConfig {
	return daemonConfig{
		what: fmt.Sprintf("node %d", id), prefix: fmt.Sprintf("node %d", id), prog: "redis-server", logName: fmt.Sprintf("node%d", id),
		sub: "run", stateDir: stateDir, id: id, dir: Dir(stateDir, id), statusFile: statusFile, pidFile: redisPIDFile,
		endedBy: "node stop",
	}
}

func etcdDaemon(stateDir string, id int) daemonConfig {
	return daemonConfig{
		what: fmt.Sprintf("etcd member %d", id), prefix: fmt.Sprintf("node: etcd member %d", id), prog: "etcd", logName: fmt.Sprintf("etcd%d", id),
		sub: "etcd-run", stateDir: stateDir, id: id, dir: etcdDir(stateDir, id), statusFile: etcdStatus, pidFile: etcdPIDFile,
		endedBy: "member stop",
	}
}

// isSupervisor reports whether pid is `redlab node SUB` (run or etcd-run)
// for this daemon.
func (c daemonConfig) isSupervisor(pid int) bool {
	if !proc.Alive(pid) {
		return false
	}
	args := proc.Cmdline(pid)
	var run, dirOK, idOK bool
	for i, a := range args {
		next := ""
		if i+1 < len(args) {
			next = args[i+1]
		}
		switch {
		case a == c.sub && i > 0 && args[i-1] == "node":
			run = true
		case a == "--state-dir" && next == c.stateDir, a == "--state-dir="+c.stateDir:
			dirOK = true
		case a == "--id" && next == strconv.Itoa(c.id), a == "--id="+strconv.Itoa(c.id):
			idOK = true
		}
	}
	return run && dirOK && idOK
}

// supervisors are the daemon's running supervisors.
func (c daemonConfig) supervisors() []int { return proc.Scan(c.isSupervisor) }

// launch runs `redlab node SUB --id ID --state-dir STATEDIR` detached (its
// own session, output appended to supervisor.log in the daemon's
// directory) and returns its pid; 0 when a supervisor of the daemon is
// running already, which is left alone.
func (c daemonConfig) launch(redlab string) (int, error) {
	if c.isSupervisor(readPID(c.path(supervisorPIDFile))) {
		return 0, nil
	}
	logf, err := os.OpenFile(c.path(supervisorLogFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", c.prefix, err)
	}
	defer logf.Close()
	cmd := exec.Command(redlab, "node", c.sub, "--id", strconv.Itoa(c.id), "--state-dir", c.stateDir)
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// A new session: no terminal, no signal meant for the caller's process
	// group (terraform's included) reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("%s: start supervisor: %w", c.prefix, err)
	}
	pid := cmd.Process.Pid
	// Not waited for: it outlives us. Whoever reaps orphans reaps it.
	_ = cmd.Process.Release()
	return pid, nil
}

// daemonStatus is a daemon's status (Status, EtcdMemberStatus), seen as
// the part they share.
type daemonStatus[S any] interface {
	*S
	shared() *DaemonStatus
}

func (st *DaemonStatus) shared() *DaemonStatus { return st }

// awaitStarted waits until the daemon whose supervisor is pid has started,
// as ready says of its status (nil, or why not yet), or reports itself
// stopped (a daemon stopped on purpose stays stopped across a supervisor
// restart). It polls every 50ms, fails early with the end of the
// supervisor's log when the supervisor exits, and with timeout(why) when
// ctx ends.
func awaitStarted[S any, P daemonStatus[S]](ctx context.Context, c daemonConfig, pid int, ready func(S) error, timeout func(why error) error) error {
	for {
		var st S
		_ = readJSONFile(c.path(c.statusFile), &st)
		ds := P(&st).shared()
		why := fmt.Errorf("supervisor reports %q", ds.State)
		if ds.SupervisorPID == pid {
			if ds.State == Stopped {
				return nil
			}
			if why = ready(st); why == nil {
				return nil
			}
		}
		if !proc.Alive(pid) {
			return fmt.Errorf("%s: supervisor exited during start; end of %s:\n%s", c.prefix, c.logFile(), c.logTail(1500))
		}
		select {
		case <-ctx.Done():
			return timeout(why)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c daemonConfig) logFile() string { return c.path(supervisorLogFile) }

// logTail is the end of the supervisor's log, n bytes at most.
func (c daemonConfig) logTail(n int) string {
	b, _ := os.ReadFile(c.logFile())
	return tail(string(b), n)
}

// stop stops the daemon's supervisors (SIGTERM: each stops its daemon
// cleanly), waiting up to limit for each and SIGKILLing one that outlives
// it (an error each, with what its threads waited in and the goroutines
// it dumped into its log on SIGQUIT). Then sweep ends what a dead
// supervisor left, the pid files go, and with purge the directory, unless
// the sweep failed (something may still be mounted there). A daemon
// without a directory is stopped already.
func (c daemonConfig) stop(ctx context.Context, limit time.Duration, purge bool, sweep func(context.Context) []error, pidFiles ...string) error {
	if _, err := os.Stat(c.dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	sups := c.supervisors()
	for _, pid := range sups {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	for _, pid := range sups {
		if !proc.WaitGone(ctx, pid, limit) {
			threads := proc.Threads(pid)
			// The Go runtime writes every goroutine's stack to stderr, the
			// supervisor's log, and exits.
			_ = syscall.Kill(pid, syscall.SIGQUIT)
			proc.WaitGone(context.Background(), pid, 2*time.Second)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			proc.WaitGone(context.Background(), pid, 5*time.Second)
			errs = append(errs, fmt.Errorf("node: %s: supervisor pid %d ignored SIGTERM; killed (threads, tid state wchan: %s); end of %s:\n%s",
				c.what, pid, threads, c.logFile(), c.logTail(6000)))
		}
	}
	swept := sweep(ctx)
	errs = append(errs, swept...)
	for _, f := range append(pidFiles, supervisorPIDFile) {
		os.Remove(c.path(f))
	}
	if purge && len(swept) == 0 {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.prefix, err))
		}
	}
	return errors.Join(errs...)
}

// daemonFile is one file of a daemon's directory besides its spec.
type daemonFile struct {
	name string
	b    *[]byte
	mode os.FileMode
}

// writeSpec writes files, then the spec (spec.json, which Prepared looks
// for), into the daemon's directory.
func (c daemonConfig) writeSpec(spec any, files ...daemonFile) error {
	for _, f := range files {
		if err := atomicfile.WriteFile(c.path(f.name), *f.b, f.mode); err != nil {
			return fmt.Errorf("%s: %w", c.prefix, err)
		}
	}
	if err := atomicfile.WriteJSON(c.path(specFile), spec, 0o644); err != nil {
		return fmt.Errorf("%s: %w", c.prefix, err)
	}
	return nil
}

// readSpec reads what writeSpec wrote: the spec into spec, then each file
// that files names, given the spec, into its place.
func (c daemonConfig) readSpec(spec any, files func() []daemonFile) error {
	if err := readJSONFile(c.path(specFile), spec); err != nil {
		return fmt.Errorf("%s: %w", c.prefix, err)
	}
	for _, f := range files() {
		b, err := os.ReadFile(c.path(f.name))
		if err != nil {
			return fmt.Errorf("%s: %w", c.prefix, err)
		}
		*f.b = b
	}
	return nil
}

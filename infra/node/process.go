package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlocklab/redlocklab/internal/proc"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/internal/atomicfile"
)

// child is one process a supervisor runs (redis-server, the replica's
// redis-server, etcd): started by it, or adopted from a previous supervisor
// or watched inside a machine, whose end is found by polling and whose exit
// status is unknown.
type child struct {
	pid     int
	adopted bool
	done    chan struct{} // closed once the process is gone
	exit    string        // how it ended, set before done is closed
	killed  bool          // ended by SIGKILL (only known for our own children)
	started time.Time     // just before the exec (zero when adopted)
}

// The parent-death signal of a child: whether it outlives a supervisor that
// crashes. Each supervisor's notes say why it chose its own.
const (
	// survivesSupervisor: no parent-death signal, so that the next
	// supervisor can adopt the child (redis-server: supervisor.go).
	survivesSupervisor syscall.Signal = 0
	// diesWithSupervisor: SIGKILL once the thread that started the child
	// ends, so the caller starts it from a locked OS thread that lives as
	// long as the supervisor (etcd: etcd.go).
	diesWithSupervisor = syscall.SIGKILL
)

// startChild starts cmd in its own process group (so that signalGroup
// reaches what it forks), with deathSig as its parent-death signal, and waits
// for it in a goroutine counted in wg, which records how it ended.
func startChild(cmd *exec.Cmd, deathSig syscall.Signal, wg *sync.WaitGroup) (*child, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: deathSig}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &child{pid: cmd.Process.Pid, started: started, done: make(chan struct{})}
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := cmd.Wait()
		p.exit = "exit status 0"
		if err != nil {
			p.exit = err.Error()
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
				p.killed = true
			}
		}
		close(p.done)
	}()
	return p, nil
}

// adoptChild watches a process left by a previous supervisor: it is not
// this process's child, so its end is found by polling (in a goroutine
// counted in wg), and how it ended is unknown.
func adoptChild(pid int, wg *sync.WaitGroup) *child {
	p := &child{pid: pid, adopted: true, done: make(chan struct{})}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for proc.Alive(p.pid) {
			time.Sleep(50 * time.Millisecond)
		}
		p.exit = "exited (adopted: status unknown)"
		close(p.done)
	}()
	return p
}

// stop asks p to shut down cleanly (SIGTERM, and SIGCONT: a paused process
// acts on SIGTERM only once continued) and escalates to SIGKILL after
// timeout; forced reports that it had to. It returns once p is gone.
func (p *child) stop(timeout time.Duration) (forced bool) {
	signalGroup(p.pid, syscall.SIGTERM)
	signalGroup(p.pid, syscall.SIGCONT)
	select {
	case <-p.done:
		return false
	case <-time.After(timeout):
		signalGroup(p.pid, syscall.SIGKILL)
		<-p.done
		return true
	}
}

// awaitAnswer polls probe (each try bounded by 500ms) every pollInterval
// until it succeeds (ok), p exits or ctx ends. down is the last instant p is
// known not to answer: the start of the last probe that failed, else p's
// start (now for an adopted process). A fault that ends when the process
// answers again ends there, not when the poll noticed the answer, so that a
// client that reached it between the two is not counted inside the fault.
func awaitAnswer(ctx context.Context, p *child, probe func(context.Context) error) (down time.Time, ok bool) {
	down = p.started
	if down.IsZero() {
		down = time.Now()
	}
	for {
		sent := time.Now()
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := probe(pctx)
		cancel()
		if err == nil {
			return down, true
		}
		down = sent
		select {
		case <-p.done:
			return down, false
		case <-ctx.Done():
			return down, false
		case <-time.After(pollInterval):
		}
	}
}

// pauseTimer is a pause fault's hold on a process: SIGSTOPped, continued
// when the pause ends. It is guarded by its supervisor's lock.
type pauseTimer struct {
	proc   *child             // the paused process; nil when none is
	cancel context.CancelFunc // ends the timer goroutine
}

// start SIGSTOPs p and calls resume(p) once d has passed, unless stop came
// first, from a goroutine counted in wg.
func (t *pauseTimer) start(p *child, d time.Duration, wg *sync.WaitGroup, resume func(*child)) {
	signalGroup(p.pid, syscall.SIGSTOP)
	t.proc = p
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.cancel = cancel
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			resume(p)
		}
	}()
}

// stop ends the timer and continues the paused process, unless it is gone
// (its pid may already be someone else's).
func (t *pauseTimer) stop() {
	if t.cancel != nil {
		t.cancel()
		t.cancel = nil
	}
	if p := t.proc; p != nil {
		select {
		case <-p.done:
		default:
			signalGroup(p.pid, syscall.SIGCONT)
		}
		t.proc = nil
	}
}

func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func writePID(path string, pid int) error {
	return atomicfile.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

// FindRedis returns the live redis-server processes whose working
// directory is dataDir: redis-server chdirs to its `dir`, and rewrites its
// argv (process title), so the working directory is what identifies it.
func FindRedis(dataDir string) []int {
	return proc.Scan(func(pid int) bool {
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if err != nil || cwd != dataDir {
			return false
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return strings.HasPrefix(strings.TrimSpace(string(comm)), "redis-server")
	})
}

// findMentioning returns live processes other than this one whose argv
// contains path (the restart guard script while it waits, for instance).
func findMentioning(path string) []int {
	return proc.Scan(func(pid int) bool {
		for _, a := range proc.Cmdline(pid) {
			if strings.Contains(a, path) {
				return true
			}
		}
		return false
	})
}

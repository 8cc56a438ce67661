package drill

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/internal/proc"
	"github.com/redlocklab/redlocklab/inventory"
)

// serveConfig is how a guard's replicas run as `redlab serve` processes.
type serveConfig struct {
	// Redlab is the redlab binary.
	Redlab   string
	Guard    inventory.Guard
	Replicas int
	// Nodes are the lab's nodes as the processes take them (rediss:// on a
	// TLS lab), verified with TLSCA when it is set.
	Nodes nodeaddr.List
	TLSCA string
	// Etcd are the lab's etcd client endpoints, for the etcd guards.
	Etcd []string
	// StoreDSN is the replicas' shared store.
	StoreDSN                             string
	LockTTL, AcquireTimeout, NodeTimeout time.Duration
	Username, Password                   string
	// StateDir is the lab's: the processes register their metrics with
	// its monitoring, when it runs some.
	StateDir string
	// Dir receives each process's output, serve-<i>.log.
	Dir string
}

// serveProcs is one guard's replicas as `redlab serve` processes, for the
// client-pause with scope process: a process stopped by SIGSTOP freezes
// everything in it (every request, the lock client, its extenders and
// keep-alives), as a stop-the-world GC pause does, which a goroutine's pause
// inside the drill's own process cannot show.
//
// Each process runs with --fault-hooks --fault-hooks-sigstop and
// --drill-events on an inherited pipe: it writes every lock tenure, and the
// start of every process pause just before it stops itself, on
// CLOCK_MONOTONIC (EventWriter). The drill reads the pipes as they come,
// merges the holds into its history on its own clock, and wakes each
// stopped process with SIGCONT once the pause's duration has passed from its
// start. Its listening socket is made by the drill and inherited too, so
// its address is known before it starts and no port can be taken in
// between.
//
// The processes die with the drill (Pdeathsig) and are stopped by stop,
// also when the drill is aborted. Every goroutine started here (one event
// reader and one waiter a process, one waker a pause) is waited for by stop.
type serveProcs struct {
	guard inventory.Guard
	hist  *History
	clock sharedClock
	log   func(format string, a ...any)
	procs []*serveProc

	wg      sync.WaitGroup
	stopped chan struct{} // closed by stop: wake every stopped process now
	once    sync.Once
	stopErr error

	mu   sync.Mutex
	errs []error // what the readers and wakers ran into
}

// serveProc is one `redlab serve` process.
type serveProc struct {
	holder string
	url    string
	cmd    *exec.Cmd
	client *inventory.Client
	exited chan struct{} // closed once the process was reaped
	status error         // cmd.Wait's, once exited is closed

	mu       sync.Mutex
	armedFor time.Duration // the duration of the pauses armed on it
}

// serveStopTimeout bounds a process's drain after SIGTERM, before SIGKILL.
const serveStopTimeout = 15 * time.Second

// startServeProcs starts cfg.Replicas processes and waits until each is
// ready. On error, what was started is stopped.
func startServeProcs(ctx context.Context, cfg serveConfig, hist *History, logf func(string, ...any)) (_ *serveProcs, err error) {
	s := &serveProcs{guard: cfg.Guard, hist: hist, clock: newSharedClock(), log: logf, stopped: make(chan struct{})}
	defer func() {
		if err != nil {
			_ = s.stop()
		}
	}()
	for i := 0; i < max(cfg.Replicas, 1); i++ {
		p, err := s.start(cfg, i)
		if err != nil {
			return nil, err
		}
		s.procs = append(s.procs, p)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, p := range s.procs {
		if err := p.waitReady(rctx); err != nil {
			return nil, fmt.Errorf("drill: guard %s: %s: %w (see %s)", cfg.Guard, p.holder, err, filepath.Join(cfg.Dir, "serve-"+strings.TrimPrefix(p.holder, "proc-")+".log"))
		}
	}
	return s, nil
}

// serveArgs is the argv of replica i after the binary: fd 3 is its event
// pipe, fd 4 its listening socket.
func serveArgs(cfg serveConfig, i int) []string {
	args := []string{"serve", "--guard", string(cfg.Guard), "--store", cfg.StoreDSN,
		"--listen-fd", "4", "--holder", "proc-" + strconv.Itoa(i),
		"--fault-hooks", "--fault-hooks-sigstop", "--drill-events", "/dev/fd/3",
		"--shutdown-timeout", (serveStopTimeout - 5*time.Second).String()}
	if cfg.LockTTL > 0 {
		args = append(args, "--lock-ttl", cfg.LockTTL.String())
	}
	if cfg.AcquireTimeout > 0 {
		args = append(args, "--acquire-timeout", cfg.AcquireTimeout.String())
	}
	if cfg.Guard.NeedsNodes() {
		args = append(args, "--nodes", cfg.Nodes.String())
		if cfg.TLSCA != "" {
			args = append(args, "--tls-ca", cfg.TLSCA)
		}
		if cfg.NodeTimeout > 0 {
			args = append(args, "--node-timeout", cfg.NodeTimeout.String())
		}
		if cfg.Username != "" {
			args = append(args, "--username", cfg.Username)
		}
	}
	if cfg.Guard.NeedsEtcd() {
		args = append(args, "--etcd", strings.Join(cfg.Etcd, ","))
	}
	return args
}

func (s *serveProcs) start(cfg serveConfig, i int) (*serveProc, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("drill: %w", err)
	}
	lf, err := ln.(*net.TCPListener).File()
	ln.Close() // the file is a duplicate: the socket stays open
	if err != nil {
		return nil, fmt.Errorf("drill: %w", err)
	}
	defer lf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("drill: %w", err)
	}
	defer pw.Close()
	out, err := os.Create(filepath.Join(cfg.Dir, "serve-"+strconv.Itoa(i)+".log"))
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("drill: %w", err)
	}
	defer out.Close()

	p := &serveProc{holder: "proc-" + strconv.Itoa(i), url: "http://" + ln.Addr().String(), exited: make(chan struct{})}
	p.cmd = exec.Command(cfg.Redlab, serveArgs(cfg, i)...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.ExtraFiles = []*os.File{pw, lf}
	p.cmd.Env = append(os.Environ(), "REDLAB_PASSWORD="+cfg.Password, "REDLAB_STATE_DIR="+cfg.StateDir)
	// Its own process group: a Ctrl-C at the terminal reaches the drill,
	// which stops its processes itself. Pdeathsig: they die with the drill.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		pr.Close()
		return nil, fmt.Errorf("drill: start redlab serve: %w", err)
	}
	if p.client, err = inventory.NewClient(p.url, &http.Client{Timeout: 10 * time.Second}); err != nil {
		pr.Close()
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		return nil, fmt.Errorf("drill: %w", err)
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		p.status = p.cmd.Wait()
		close(p.exited)
	}()
	go func() {
		defer s.wg.Done()
		defer pr.Close()
		s.read(p, pr)
	}()
	return p, nil
}

// waitReady polls /readyz until the process is ready, exits or ctx ends.
func (p *serveProc) waitReady(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := p.client.Ready(ctx)
		if err == nil && st.Ready {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("redlab serve exited: %v", p.status)
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("not ready (store: %s, lock: %s)", st.Store, st.Lock)
			}
			return fmt.Errorf("not ready in time: %w", err)
		case <-tick.C:
		}
	}
}

// read merges a process's events into the history until the process
// closes its end of the pipe (it exited).
func (s *serveProcs) read(p *serveProc, r *os.File) {
	err := scanRecords(r, "events of "+p.holder, func(h *HoldRecord, f *FaultRecord, _ *OpRecord) {
		if h != nil {
			s.hist.AddHold(s.guard, h.Hold(s.clock.time))
			return
		}
		if f.Fault == string(fault.ClientPause) && f.Event == "start" {
			s.paused(p, f.ID, s.clock.time(f.AtNs))
		}
	})
	if err != nil {
		s.fail(err)
	}
}

func (s *serveProcs) fail(err error) {
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
}

// paused records a process pause that started at start and wakes the
// process when its armed duration has passed, or at once when the drill
// stops.
func (s *serveProcs) paused(p *serveProc, id string, start time.Time) {
	p.mu.Lock()
	d := p.armedFor
	p.mu.Unlock()
	s.hist.AddPause(id, s.guard, inventory.ScopeProcess, "start", start)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// The process tells before it stops: a SIGCONT sent before its
		// SIGSTOP would leave it stopped for good.
		if err := p.waitStopped(s.stopped); err != nil {
			s.fail(fmt.Errorf("drill: guard %s: %s: %w", s.guard, p.holder, err))
		}
		t := time.NewTimer(time.Until(start.Add(d)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.stopped:
		case <-p.exited:
		}
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil && !errors.Is(err, os.ErrProcessDone) {
			s.fail(fmt.Errorf("drill: guard %s: SIGCONT %s: %w", s.guard, p.holder, err))
		}
		s.hist.AddPause(id, s.guard, inventory.ScopeProcess, "end", time.Now())
	}()
}

// waitStopped waits until the process is in state T (stopped), exits, or
// stop is closed.
func (p *serveProc) waitStopped(stop <-chan struct{}) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		st, err := proc.State(p.cmd.Process.Pid)
		if err == nil && st == 'T' {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited while pausing: %v", p.status)
		case <-stop:
			return nil
		case <-tick.C:
		}
	}
}

// URLs are the processes' base URLs.
func (s *serveProcs) URLs() []string {
	out := make([]string, len(s.procs))
	for i, p := range s.procs {
		out[i] = p.url
	}
	return out
}

// Arm makes the next count holders of the guard stop their process for d,
// spread over the processes in order: with count 1, the first one.
func (s *serveProcs) Arm(ctx context.Context, d time.Duration, count int) error {
	var errs []error
	n := len(s.procs)
	for i, p := range s.procs {
		c := count / n
		if i < count%n {
			c++
		}
		if c == 0 {
			continue
		}
		p.mu.Lock()
		p.armedFor = d
		p.mu.Unlock()
		if err := p.client.PauseNext(ctx, d, c, inventory.ScopeProcess); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.holder, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("drill: guard %s: arm process pause: %w", s.guard, err)
	}
	return nil
}

// stop wakes stopped processes, drains them (SIGTERM: in-flight
// reservations finish and their holds are written), kills those that do not
// exit in time, and waits for every goroutine: once it returns, every hold
// of the processes is in the history. It is idempotent and returns what went
// wrong while the processes ran.
func (s *serveProcs) stop() error {
	s.once.Do(func() {
		close(s.stopped)
		for _, p := range s.procs {
			// SIGCONT first: a stopped process does not act on SIGTERM.
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		deadline := time.NewTimer(serveStopTimeout)
		defer deadline.Stop()
		killed := map[*serveProc]bool{}
		for _, p := range s.procs {
			select {
			case <-p.exited:
				continue
			case <-deadline.C:
			}
			// Past the deadline: kill every process still running.
			for _, q := range s.procs {
				select {
				case <-q.exited:
				default:
					s.log("guard %s: %s did not drain in %v: SIGKILL", s.guard, q.holder, serveStopTimeout)
					killed[q] = true
					_ = q.cmd.Process.Kill()
				}
			}
			break
		}
		s.wg.Wait()
		for _, p := range s.procs {
			if p.status != nil && !killed[p] {
				s.fail(fmt.Errorf("drill: guard %s: %s: redlab serve: %w", s.guard, p.holder, p.status))
			}
		}
		s.mu.Lock()
		s.stopErr = errors.Join(s.errs...)
		s.mu.Unlock()
	})
	return s.stopErr
}

package node

import (
	"context"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/internal/atomicfile"
)

// A supervised daemon's life, written once: a Redis node's supervisor
// (supervisor.go) and an etcd member's (etcd.go) are a daemon each, with
// two small additions, as etcd's concurrency.Session is the lease that a
// Mutex and an Election build on. The life:
//
//   - begin: the lab's owner going ends the supervisor as its context
//     would (owner.go), a second supervisor of the daemon is refused, and
//     the supervisor's pid file is written;
//   - restore: the counters, the stopped state and the network faults of
//     a previous supervisor carry over, and the faults whose `for` passed
//     while none ran end (deadline.go);
//   - the fronts (addFront): every network fault acts on each of them;
//   - serve: the control endpoint (control.go) and the owner watch;
//   - loop: start the process whenever it should run and does not, after
//     what its kind holds it back for (hold: the restart guard's
//     pre-start, a member's restart delay), wait until it answers (probe),
//     and follow its exit (a crash: a restart counted; a power loss cut on
//     the power-loss filesystem first, powerloss.go);
//   - end: every fault still open ends with the daemon, the status says
//     Down.
//
// The faults that act on the process or on the fronts are the daemon's
// too (faults.go). What each kind adds is in its daemonKind.

// DaemonStatus is what every supervisor reports of its daemon: the part a
// Redis node's status (Status) and an etcd member's (EtcdMemberStatus)
// share.
type DaemonStatus struct {
	ID            int      `json:"id"`
	State         State    `json:"state"`
	SupervisorPID int      `json:"supervisor_pid,omitempty"`
	Restarts      int      `json:"restarts"`
	ControlPort   int      `json:"control_port"`
	Partitioned   bool     `json:"partitioned,omitempty"`
	Latency       Duration `json:"latency,omitempty"`
	Jitter        Duration `json:"jitter,omitempty"`
	LastExit      string   `json:"last_exit,omitempty"`
	// Since is when State last changed.
	Since time.Time `json:"since"`
	// Active maps each fault in effect on the daemon to its ID in
	// faults.jsonl.
	Active map[FaultKind]string `json:"active_faults,omitempty"`
	// Until is when each active fault given a `for` ends (deadline.go).
	Until map[FaultKind]time.Time `json:"fault_until,omitempty"`
}

// clone is st with maps of its own.
func (st DaemonStatus) clone() DaemonStatus {
	st.Active = maps.Clone(st.Active)
	if st.Active == nil {
		st.Active = map[FaultKind]string{}
	}
	st.Until = maps.Clone(st.Until)
	return st
}

// daemonKind is what a supervisor adds to the shared life: how its
// process starts, answers and ends.
type daemonKind interface {
	// hold waits, in state Waiting, until the process may start: the
	// restart fault's delay instead of the configured one when override
	// is set. It returns ctx's error when a fault cut the wait short.
	hold(ctx context.Context, override *time.Duration) error
	// exec starts the process.
	exec() (*child, error)
	// prober returns the check that the process answers, for one start.
	prober() func(context.Context) error
	// exited is told, outside the lock, that p ended (nil: a start that
	// never ran, since a stop came as the hold ended), after any power
	// cut.
	exited(p *child, clean bool)
	// startedLocked says whether a start fault has done its part.
	startedLocked() bool
}

// daemonConfig names a daemon and where its files are.
type daemonConfig struct {
	// what names it in messages ("node 2", "etcd member 1"), prefix
	// starts its errors ("node 2", "node: etcd member 1").
	what, prefix string
	// prog names its process in the log ("redis-server", "etcd"), and
	// logName starts its supervisor's log lines ("node2", "etcd1").
	prog, logName string
	// sub is the `redlab node SUB` that supervises it (run, etcd-run).
	sub      string
	stateDir string
	id       int
	// dir is its directory; statusFile and pidFile are in it.
	dir, statusFile, pidFile string
	controlPort              int
	// endedBy is what the end of the faults still open at the end says.
	endedBy string
}

// daemon is the shared life of a supervised daemon. Its state is guarded
// by mu; the loop is the only goroutine that starts the process or reacts
// to its exit, fault handlers only send signals and flip wantUp.
type daemon struct {
	daemonConfig
	kind   daemonKind
	log    *log.Logger
	faults faultBook // the status's Active, and faults.jsonl
	fronts []*proxy  // where the network faults act
	// persistence and acked say what a power loss took (powerloss.go): the
	// daemon's profile and its count of acknowledged writes ("" and nil
	// where they are not known).
	persistence Persistence
	acked       func() int64
	endForOwner context.CancelFunc // ends the supervisor's context

	mu sync.Mutex
	// ds and pid are the shared part of the kind's status, record, and its
	// field of the process's pid; record is what the status file holds.
	ds         *DaemonStatus
	pid        *int
	record     any
	proc       *child
	wantUp     bool
	stopping   bool               // the current process was asked to stop
	override   *time.Duration     // the restart fault's delay for the next start
	cancelWait context.CancelFunc // cuts a hold short
	paused     pauseTimer
	timers     deadlines // partitions and latency given a `for`
	disk       disk      // the power-loss model: the data directory
	pendingCut *powerCut // a power loss waiting for its process to die
	// crashedAt is when the process last died unasked (zero once it
	// answers again); lastDowntime is how long the last such crash kept
	// the daemon from answering (see metrics.go).
	crashedAt    time.Time
	lastDowntime time.Duration
	wake         chan struct{} // the loop re-reads wantUp
	changed      chan struct{} // closed and replaced on every state change

	wg sync.WaitGroup // goroutines other than the loop
}

// setup makes d the life of kind: st and pid are the shared part of its
// status, record, and its pid field; rec records its faults.
func (d *daemon) setup(kind daemonKind, c daemonConfig, logw io.Writer, st *DaemonStatus, pid *int, record any, rec *recorder) {
	if logw == nil {
		logw = io.Discard
	}
	d.daemonConfig, d.kind = c, kind
	d.log = log.New(logw, c.logName+" ", log.LstdFlags|log.Lmicroseconds)
	d.ds, d.pid, d.record = st, pid, record
	d.wantUp = true
	d.wake = make(chan struct{}, 1)
	d.changed = make(chan struct{})
	d.faults = faultBook{rec: rec, log: d.log, active: &st.Active, save: d.saveLocked}
	d.timers = deadlines{mu: &d.mu, wg: &d.wg, until: &st.Until, end: d.endTimedLocked}
}

// path is a file of the daemon's directory.
func (c daemonConfig) path(name string) string { return filepath.Join(c.dir, name) }

func (d *daemon) errorf(format string, a ...any) error {
	return fmt.Errorf(d.prefix+": "+format, a...)
}

// begin starts the supervisor's life: ctx (returned) also ends when the
// lab's owner goes, a second supervisor is refused, the pid file is
// written. done removes it and ends ctx.
func (d *daemon) begin(ctx context.Context) (_ context.Context, done func(), err error) {
	ctx, d.endForOwner = context.WithCancel(ctx)
	pidFile := d.path(supervisorPIDFile)
	if pid := readPID(pidFile); pid != os.Getpid() && d.isSupervisor(pid) {
		d.endForOwner()
		return nil, nil, d.errorf("a supervisor is already running (pid %d)", pid)
	}
	if err := writePID(pidFile, os.Getpid()); err != nil {
		d.endForOwner()
		return nil, nil, d.errorf("%w", err)
	}
	return ctx, func() {
		os.Remove(pidFile)
		d.endForOwner()
	}, nil
}

// restore carries the counters, the stopped state and the network faults
// over from old, a previous supervisor's status; the faults whose `for`
// passed meanwhile end instead.
func (d *daemon) restore(old DaemonStatus) {
	*d.ds = DaemonStatus{
		ID: d.id, State: Starting, SupervisorPID: os.Getpid(), Restarts: old.Restarts, ControlPort: d.controlPort,
		Partitioned: old.Partitioned, Latency: old.Latency, Jitter: old.Jitter,
		LastExit: old.LastExit, Active: old.Active, Until: old.Until, Since: time.Now(),
	}
	if d.ds.Active == nil {
		d.ds.Active = map[FaultKind]string{}
	}
	d.endExpired(d.timers.expiredLocked(time.Now()))
	if old.State == Stopped {
		d.wantUp = false
	}
}

// endRestored ends a fault of kind that a previous supervisor left open and
// that did not outlive it.
func (d *daemon) endRestored(kind FaultKind, params map[string]string) {
	if id := d.ds.Active[kind]; id != "" {
		_ = d.faults.rec.end(id, kind, params)
		delete(d.ds.Active, kind)
	}
}

// restartNote is the end of a fault the previous supervisor's end cut
// short.
var restartNote = map[string]string{"ended_by": "supervisor restart"}

// addFront starts a front on 127.0.0.1:port to upstream, named name in
// errors; the network faults act on every front.
func (d *daemon) addFront(name string, port int, upstream string) (*proxy, error) {
	x, err := startProxy(name, "127.0.0.1:"+strconv.Itoa(port), upstream)
	if err != nil {
		return nil, err
	}
	d.fronts = append(d.fronts, x)
	return x, nil
}

// closeFronts stops every front.
func (d *daemon) closeFronts() {
	for _, x := range d.fronts {
		x.Stop()
	}
}

// armFronts applies the network faults a previous supervisor left to the
// fronts, and starts the timers that end them.
func (d *daemon) armFronts() {
	for _, x := range d.fronts {
		if d.ds.Partitioned {
			if err := x.partition(); err != nil {
				d.log.Printf("re-apply partition: %v", err)
			}
		}
		if d.ds.Latency > 0 {
			if err := x.latency(time.Duration(d.ds.Latency), time.Duration(d.ds.Jitter)); err != nil {
				d.log.Printf("re-apply latency: %v", err)
			}
		}
	}
	d.mu.Lock()
	d.timers.rearmLocked()
	d.mu.Unlock()
}

// serve serves h, the control endpoint, until ctx ends, and watches the
// lab's owner.
func (d *daemon) serve(ctx context.Context, h http.Handler) error {
	if err := serveControl(ctx, d.controlPort, h, d.log, &d.wg); err != nil {
		return d.errorf("control endpoint: %w", err)
	}
	d.wg.Go(func() { watchOwner(ctx, d.stateDir, d.log, d.endForOwner) })
	return nil
}

// loop starts the process whenever it should run and is not, and handles
// its exits, until ctx ends; then it stops it cleanly.
func (d *daemon) loop(ctx context.Context) {
	for {
		d.mu.Lock()
		p, want := d.proc, d.wantUp
		d.mu.Unlock()
		switch {
		case p != nil:
			d.awaitReady(ctx, p)
			select {
			case <-p.done:
				d.onExit(p)
			case <-ctx.Done():
				d.stopProc(p)
				d.onExit(p)
				return
			}
		case !want:
			d.mu.Lock()
			if d.ds.State != Stopped {
				d.setStateLocked(Stopped)
			}
			d.mu.Unlock()
			select {
			case <-d.wake:
			case <-ctx.Done():
				return
			}
		default:
			if err := d.start(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				d.log.Printf("start: %v", err)
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

// start holds the process back as its kind says, then starts it. A fault
// that cuts the hold short (a stop, a restart with a new delay) leaves the
// decision to the loop.
func (d *daemon) start(ctx context.Context) error {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d.mu.Lock()
	override := d.override
	d.override = nil
	d.cancelWait = cancel
	d.setStateLocked(Waiting)
	d.mu.Unlock()

	err := d.kind.hold(hctx, override)

	d.mu.Lock()
	d.cancelWait = nil
	want := d.wantUp
	if hctx.Err() != nil && ctx.Err() == nil {
		if !want {
			d.setStateLocked(Stopped)
		}
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if !want {
		d.kind.exited(nil, true)
		return nil
	}
	p, err := d.kind.exec()
	if err != nil {
		return err
	}
	_ = writePID(d.path(d.pidFile), p.pid)
	d.mu.Lock()
	d.proc = p
	*d.pid = p.pid
	d.setStateLocked(Starting)
	d.mu.Unlock()
	d.log.Printf("%s started, pid %d", d.prog, p.pid)
	return nil
}

// run starts cmd, a process of the daemon, in its directory with its
// output in the log, and deathSig its parent-death signal (startChild).
func (d *daemon) run(cmd *exec.Cmd, deathSig syscall.Signal) (*child, error) {
	cmd.Dir = d.dir
	cmd.Stdout, cmd.Stderr = d.log.Writer(), d.log.Writer()
	p, err := startChild(cmd, deathSig, &d.wg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.prog, err)
	}
	return p, nil
}

// awaitReady waits until p answers (then the daemon is up and the crash
// faults end at the last instant it was seen not answering), exits, or
// ctx ends.
func (d *daemon) awaitReady(ctx context.Context, p *child) {
	d.mu.Lock()
	starting := d.ds.State == Starting && d.proc == p
	d.mu.Unlock()
	if !starting {
		return
	}
	down, ok := awaitAnswer(ctx, p, d.kind.prober())
	if !ok {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.proc != p || d.ds.State != Starting {
		return
	}
	d.setStateLocked(Up)
	if !d.crashedAt.IsZero() {
		d.lastDowntime, d.crashedAt = time.Since(d.crashedAt), time.Time{}
	}
	for _, k := range crashFaults {
		d.faults.endAtLocked(k, down, nil)
	}
}

// exitedLocked records that process p ended, cleanly (a stop or restart
// asked for it) or not (a crash, counted as a restart when the daemon
// should be up), and moves the daemon to waiting or stopped.
func (d *daemon) exitedLocked(p *child, clean bool) {
	if !clean && d.wantUp {
		d.ds.Restarts++
		d.crashedAt = time.Now()
	}
	d.stopping = false
	d.proc = nil
	*d.pid = 0
	d.ds.LastExit = p.exit
	if d.paused.proc == p {
		d.stopPauseLocked()
	}
	if d.wantUp {
		d.setStateLocked(Waiting)
	} else {
		d.setStateLocked(Stopped)
	}
}

// cleanness names an exit for the log.
func cleanness(clean bool) string {
	if clean {
		return "clean"
	}
	return "unclean"
}

// onExit records how p ended, applies a power loss that killed it (before
// anything can start the process again), and tells the kind.
func (d *daemon) onExit(p *child) {
	d.mu.Lock()
	cut := d.pendingCut
	if cut != nil && cut.proc == p {
		d.pendingCut = nil
	} else {
		cut = nil
	}
	clean := d.stopping && !p.killed
	d.exitedLocked(p, clean)
	d.mu.Unlock()
	os.Remove(d.path(d.pidFile))

	d.log.Printf("%s pid %d ended (%s): %s", d.prog, p.pid, cleanness(clean), p.exit)
	if cut != nil {
		d.applyPowerLoss(cut)
	}
	d.kind.exited(p, clean)
}

// stopProc asks p to shut down cleanly (SIGTERM: redis-server runs its
// SHUTDOWN path, fsyncing the AOF) and escalates to SIGKILL after
// stopTimeout. It returns once p is gone.
func (d *daemon) stopProc(p *child) {
	d.mu.Lock()
	d.stopping = true
	d.mu.Unlock()
	if p.stop(stopTimeout) {
		d.log.Printf("%s pid %d ignored SIGTERM for %v; SIGKILL", d.prog, p.pid, stopTimeout)
	}
}

// end closes the life once the loop has returned: the pause and the
// deadlines stop, every goroutine is waited for, the faults still open
// end, and the status says Down.
func (d *daemon) end() {
	d.mu.Lock()
	d.stopPauseLocked()
	d.timers.stopLocked()
	d.mu.Unlock()
	d.wg.Wait()
	d.endAllFaults()
	os.Remove(d.path(d.pidFile))
	d.mu.Lock()
	d.ds.State, d.ds.SupervisorPID, *d.pid = Down, 0, 0
	d.saveLocked()
	d.mu.Unlock()
	d.log.Printf("supervisor stopped")
}

// setStateLocked changes the state, persists the status and wakes waiters.
func (d *daemon) setStateLocked(st State) {
	if d.ds.State != st {
		d.ds.State = st
		d.ds.Since = time.Now()
	}
	d.saveLocked()
}

func (d *daemon) saveLocked() {
	if err := atomicfile.WriteJSON(d.path(d.statusFile), d.record, 0o644); err != nil {
		d.log.Printf("save status: %v", err)
	}
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *daemon) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// waitFor blocks until ok holds (it runs under the lock) or ctx ends.
func (d *daemon) waitFor(ctx context.Context, ok func() bool) error {
	for {
		d.mu.Lock()
		done, st, ch := ok(), d.ds.State, d.changed
		d.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s still %s: %w", d.what, st, ctx.Err())
		}
	}
}

func (d *daemon) notRunningLocked() error {
	return fmt.Errorf("%w on %s (%s)", ErrNotRunning, d.what, d.ds.State)
}

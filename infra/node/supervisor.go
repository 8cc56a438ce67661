package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/internal/redirect"
	"github.com/redlocklab/redlocklab/redlock"
)

// ErrNotRunning is returned by a fault that needs a running redis-server
// when the node has none (stopped, or waiting out its restart delay).
var ErrNotRunning = errors.New("node: redis-server is not running")

// Supervision choices, in one place:
//
//   - redis-server runs in its own process group without a parent-death
//     signal: when the supervisor itself crashes, redis keeps serving (as it
//     would when systemd restarts), and the next supervisor for the node
//     adopts it (found by its working directory, the rendered `dir`). Only
//     `node stop` / `lab down` end it, and they also sweep processes whose
//     supervisor is gone, so nothing is left behind. Where the data
//     directory is the power-loss filesystem (powerfs.go), the supervisor
//     serves it: its crash takes the disk with it, and the next supervisor
//     kills the redis-server left on the dead mount instead of adopting it.
//   - A crash (any exit not asked for) is reported to the restart guard as
//     `post-stop unclean` and the restart goes through `pre-start`, which
//     holds the configured delay: the systemd unit's semantics.
//   - A brand-new node (its directory created by this start) is started
//     with REDIS_GUARD_DELAY=0 the first time: it has never granted a lock,
//     so the boot delay has nothing to protect, and `lab up` stays fast.
const (
	stopTimeout  = 15 * time.Second // SIGTERM to SIGKILL
	guardTimeout = 10 * time.Second // post-stop
	pollInterval = 20 * time.Millisecond
)

// supervisor runs one node. Its state is guarded by mu; the run loop is the
// only goroutine that starts redis-server or reacts to its exit, fault
// handlers only send signals and flip wantUp.
type supervisor struct {
	spec   Spec
	conf   redisConf
	log    *log.Logger
	faults faultBook // its status's Active, and faults.jsonl
	proxy  *proxy
	direct *redis.Client // the private redis port, bypassing the proxy
	auth   User          // how the supervisor logs in to its redis-servers
	rep    *replicaSet   // nil unless the node has a replica
	mach   *machineNode  // nil unless the node is a machine

	mu          sync.Mutex
	st          Status
	proc        *child
	wantUp      bool
	stopping    bool           // the current process was asked to stop
	override    *time.Duration // REDIS_GUARD_DELAY for the next pre-start
	cancelGuard context.CancelFunc
	paused      pauseTimer
	timers      deadlines // partitions and latency given a `for`
	rateStop    context.CancelFunc
	disk        disk      // the power-loss model: the data directory
	pendingCut  *powerCut // a power loss waiting for its process to die
	failingOver bool      // a failover is swapping the pair's roles
	// crashedAt is when redis-server last died unasked (zero once it
	// answers again); lastDowntime is how long the last such crash kept
	// the node from answering (see metrics.go).
	crashedAt    time.Time
	lastDowntime time.Duration
	wake         chan struct{} // the loop re-reads wantUp
	changed      chan struct{} // closed and replaced on every state change

	wg sync.WaitGroup // goroutines other than the loop
}

// Run runs the supervisor of node id from the spec on disk in
// stateDir/nodeN (written by Prepare) until ctx ends, then stops
// redis-server cleanly, tells the restart guard, stops the proxy and the
// control endpoint and removes its pid files. Log lines go to logw.
func Run(ctx context.Context, stateDir string, id int, logw io.Writer) error {
	spec, err := LoadSpec(stateDir, id)
	if err != nil {
		return err
	}
	// The lab's owner going ends the supervisor as ctx would (owner.go).
	ctx, endForOwner := context.WithCancel(ctx)
	defer endForOwner()
	if pid := readPID(spec.path(supervisorPIDFile)); pid != os.Getpid() && isSupervisor(pid, spec.StateDir, spec.ID) {
		return fmt.Errorf("node %d: a supervisor is already running (pid %d)", id, pid)
	}
	if logw == nil {
		logw = io.Discard
	}
	auth, err := redisAuth(spec)
	if err != nil {
		return err
	}
	s := &supervisor{
		spec:    spec,
		conf:    spec.hostConf(),
		log:     log.New(logw, fmt.Sprintf("node%d ", id), log.LstdFlags|log.Lmicroseconds),
		wake:    make(chan struct{}, 1),
		changed: make(chan struct{}),
		wantUp:  true,
		auth:    auth,
	}
	s.faults = faultBook{rec: newRecorder(spec.StateDir, spec.ID), log: s.log, active: &s.st.Active, save: s.saveLocked}
	s.timers = deadlines{mu: &s.mu, wg: &s.wg, until: &s.st.Until, end: s.endTimedLocked}
	redisAddr := "127.0.0.1:" + strconv.Itoa(spec.RedisPort)
	if spec.Machine != nil {
		redisAddr = net.JoinHostPort(spec.Machine.Address, strconv.Itoa(spec.RedisPort))
	}
	tlsCfg, err := s.conf.tlsConfig()
	if err != nil {
		return err
	}
	directOpts := &redis.Options{
		Addr: redisAddr, MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		PoolSize: 2, Username: auth.Name, Password: auth.Password,
	}
	redlock.WithTLS(tlsCfg)(directOpts)
	s.direct = redis.NewClient(directOpts)
	defer s.direct.Close()
	if err := writePID(spec.path(supervisorPIDFile), os.Getpid()); err != nil {
		return fmt.Errorf("node %d: %w", id, err)
	}
	defer os.Remove(spec.path(supervisorPIDFile))

	s.restoreStatus()
	// The front leads to the pair's master: the original redis-server, or
	// its replica after a failover.
	upstream := redisAddr
	if spec.hasReplica() {
		upstream = s.masterAddr()
	}
	if s.proxy, err = startProxy(fmt.Sprintf("node%d", id), "127.0.0.1:"+strconv.Itoa(spec.Port), upstream); err != nil {
		return err
	}
	defer s.proxy.Stop()
	s.reapplyNetworkFaults()
	if spec.Machine == nil {
		if stop := s.redirectFront(ctx, spec.Port); stop != nil {
			defer stop()
		}
	}
	s.mu.Lock()
	s.timers.rearmLocked()
	s.mu.Unlock()
	if spec.hasReplica() {
		if err := s.startReplica(auth); err != nil {
			return err
		}
		defer s.stopReplica()
	}

	if spec.Machine != nil {
		if s.mach, err = newMachineNode(ctx, spec, s.log); err != nil {
			return err
		}
		defer func() {
			if err := s.mach.close(); err != nil {
				s.log.Printf("machine: %v", err)
			}
		}()
	}

	if err := serveControl(ctx, spec.ControlPort, s.handler(), s.log, &s.wg); err != nil {
		return fmt.Errorf("node %d control endpoint: %w", id, err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		watchOwner(ctx, spec.StateDir, s.log, endForOwner)
	}()

	if s.mach != nil {
		// After newMachineNode swept what a dead supervisor left; before
		// the first boot binds it.
		s.disk = mountMachineDisk(spec, s.conf.dir, s.log)
		defer s.disk.close(s.log)
	} else {
		// Each node sweeps its own dead mount as it starts (lab up), after
		// killing what ran on it; StopNode sweeps at lab down.
		s.disk = mountDisk(s.conf.dir, spec.PlainDisk, false, s.log, s.diskOrphans)
		defer s.disk.close(s.log)
		s.adoptOrphans()
	}
	if s.rep != nil {
		s.wg.Add(2)
		go func() {
			defer s.wg.Done()
			s.superviseReplica(ctx)
		}()
		go func() {
			defer s.wg.Done()
			s.reconcileRoles(ctx)
		}()
		s.log.Printf("replica: 127.0.0.1:%d follows through 127.0.0.1:%d", spec.ReplicaPort, spec.ReplicaLinkPort)
	}
	s.log.Printf("supervising: proxy 127.0.0.1:%d -> redis %s, control 127.0.0.1:%d", spec.Port, redisAddr, spec.ControlPort)
	if s.mach != nil {
		s.machineLoop(ctx)
	} else {
		s.loop(ctx)
	}

	s.stopBackground()
	s.wg.Wait()
	s.endAllFaults()
	os.Remove(spec.path(redisPIDFile))
	s.mu.Lock()
	s.st.State, s.st.SupervisorPID, s.st.RedisPID = Down, 0, 0
	s.saveLocked()
	s.mu.Unlock()
	s.log.Printf("supervisor stopped")
	return nil
}

// restoreStatus carries the counters, the stopped state and the network
// faults over from a previous supervisor of this node.
func (s *supervisor) restoreStatus() {
	var old Status
	_ = readJSONFile(s.spec.path(statusFile), &old)
	s.st = Status{
		ID: s.spec.ID, State: Starting, SupervisorPID: os.Getpid(),
		Restarts: old.Restarts, Port: s.spec.Port, RedisPort: s.spec.RedisPort,
		ControlPort: s.spec.ControlPort, Persistence: s.conf.persistence(),
		Partitioned: old.Partitioned, Latency: old.Latency, Jitter: old.Jitter,
		LastExit: old.LastExit, Active: old.Active, Until: old.Until, Since: time.Now(),
	}
	if s.st.Active == nil {
		s.st.Active = map[FaultKind]string{}
	}
	endExpired(s.timers.expiredLocked(time.Now()), s.st.Active, s.faults.rec, &s.st.Partitioned, &s.st.Latency, &s.st.Jitter)
	if old.State == Stopped {
		s.wantUp = false
	}
	if s.spec.hasReplica() {
		r := ReplicaStatus{}
		if old.Replica != nil {
			r.Promoted, r.Restarts = old.Replica.Promoted, old.Replica.Restarts
		}
		r.Addr = "127.0.0.1:" + strconv.Itoa(s.spec.ReplicaPort)
		r.Link = "127.0.0.1:" + strconv.Itoa(s.spec.ReplicaLinkPort)
		r.State = Down
		s.st.Replica = &r
	}
	// A failover cut short by the end of the previous supervisor.
	if id := s.st.Active[fault.Failover]; id != "" {
		_ = s.faults.rec.end(id, fault.Failover, map[string]string{"ended_by": "supervisor restart"})
		delete(s.st.Active, fault.Failover)
	}
}

// RedirectEnv, set to "off" in a supervisor's environment, keeps every
// connection on the front (see internal/redirect): to measure the front
// itself, or where nftables must not be touched.
const RedirectEnv = "REDLAB_FRONT_REDIRECT"

// redirectFront hands the client front's connections to the kernel while
// no fault is in force, where the machine allows it (root, nft and
// conntrack), and returns the function that takes them back; nil when the
// front keeps them all, which it logs with the reason.
func (s *supervisor) redirectFront(ctx context.Context, port int) (stop func()) {
	if os.Getenv(RedirectEnv) == "off" {
		s.log.Printf("front: every connection goes through the front (%s=off)", RedirectEnv)
		return nil
	}
	if err := redirect.Available(); err != nil {
		s.log.Printf("front: every connection goes through the front: %v", err)
		return nil
	}
	kr, err := redirect.New(ctx, port)
	if err == nil {
		stop, err = s.proxy.redirect(ctx, kr)
	}
	if err != nil {
		s.log.Printf("front: every connection goes through the front: %v", err)
		return nil
	}
	s.log.Printf("front: the kernel redirects 127.0.0.1:%d while no fault is in force", port)
	return stop
}

func (s *supervisor) reapplyNetworkFaults() {
	if s.st.Partitioned {
		if err := s.proxy.partition(); err != nil {
			s.log.Printf("re-apply partition: %v", err)
		}
	}
	if s.st.Latency > 0 {
		if err := s.proxy.latency(time.Duration(s.st.Latency), time.Duration(s.st.Jitter)); err != nil {
			s.log.Printf("re-apply latency: %v", err)
		}
	}
}

// adoptOrphans takes over a redis-server left by a previous supervisor, and
// ends restart guards it left waiting.
func (s *supervisor) adoptOrphans() {
	for _, pid := range findMentioning(s.spec.path(guardFile)) {
		s.log.Printf("ending restart guard pid %d left by a previous supervisor", pid)
		signalGroup(pid, syscall.SIGKILL)
	}
	pids := FindRedis(s.conf.dir)
	for i, pid := range pids {
		if i > 0 {
			s.log.Printf("killing extra redis-server pid %d", pid)
			signalGroup(pid, syscall.SIGKILL)
			continue
		}
		s.log.Printf("adopting redis-server pid %d left by a previous supervisor", pid)
		// A pause timer died with the old supervisor.
		signalGroup(pid, syscall.SIGCONT)
		if id := s.st.Active[fault.Pause]; id != "" {
			_ = s.faults.rec.end(id, fault.Pause, nil)
			delete(s.st.Active, fault.Pause)
		}
		p := adoptChild(pid, &s.wg)
		s.mu.Lock()
		s.proc = p
		s.st.RedisPID = pid
		s.setStateLocked(Starting)
		s.mu.Unlock()
		_ = writePID(s.spec.path(redisPIDFile), pid)
	}
}

// loop starts redis-server through the guard whenever it should run and is
// not, and handles its exits, until ctx ends; then it stops it cleanly.
func (s *supervisor) loop(ctx context.Context) {
	for {
		s.mu.Lock()
		p, want := s.proc, s.wantUp
		s.mu.Unlock()
		switch {
		case p != nil:
			s.awaitReady(ctx, p)
			select {
			case <-p.done:
				s.onExit(p)
			case <-ctx.Done():
				s.stopProc(p)
				s.onExit(p)
				return
			}
		case !want:
			s.mu.Lock()
			if s.st.State != Stopped {
				s.setStateLocked(Stopped)
			}
			s.mu.Unlock()
			select {
			case <-s.wake:
			case <-ctx.Done():
				return
			}
		default:
			if err := s.start(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Printf("start: %v", err)
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

// start runs the guard's pre-start (which holds the restart delay) and then
// redis-server.
func (s *supervisor) start(ctx context.Context) error {
	fresh := fileExists(s.spec.path(freshMarker))
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	override := s.override
	s.override = nil
	if override == nil && fresh {
		zero := time.Duration(0)
		override = &zero
	}
	s.cancelGuard = cancel
	s.setStateLocked(Waiting)
	s.mu.Unlock()

	err := s.guard(gctx, override, "pre-start")

	s.mu.Lock()
	s.cancelGuard = nil
	want := s.wantUp
	if gctx.Err() != nil && ctx.Err() == nil {
		// A stop, or a restart with a new delay (in s.override), cut the
		// wait short; the loop decides again.
		if !want {
			s.setStateLocked(Stopped)
		}
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if !want {
		// Stopped just as the guard let us through: tell it we never ran.
		return s.guard(ctx, nil, "post-stop", "clean")
	}

	// Only the very first start of a new node skips the delay.
	os.Remove(s.spec.path(freshMarker))
	p, err := s.startRedis(confFile)
	if err != nil {
		_ = s.guard(ctx, nil, "post-stop", "unclean")
		return err
	}
	_ = writePID(s.spec.path(redisPIDFile), p.pid)
	s.mu.Lock()
	s.proc = p
	s.st.RedisPID = p.pid
	s.setStateLocked(Starting)
	s.mu.Unlock()
	s.log.Printf("redis-server started, pid %d", p.pid)
	return nil
}

// startRedis starts a redis-server of the node (the original process or the
// replica) from conf, a file in the node's directory; it chdirs to its
// conf's `dir` itself.
//
// The child starts in the node's directory, never in the data directory:
// that is the power-loss filesystem this process serves, and Go's child
// does its chdir between clone and execve, while the forking thread waits
// in clone. The kernel sends the chdir's lookup to this process, whose
// runtime may need a new thread (another clone) to answer it: under load
// the start hung there and the supervisor with it, deaf to SIGTERM.
func (s *supervisor) startRedis(conf string) (*child, error) {
	bin := s.spec.RedisServer
	if bin == "" {
		bin = "redis-server"
	}
	cmd := exec.Command(bin, s.spec.path(conf))
	cmd.Dir = s.spec.dir()
	// `supervised auto` would talk to a systemd that does not supervise it.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "NOTIFY_SOCKET=") })
	cmd.Stdout, cmd.Stderr = s.log.Writer(), s.log.Writer()
	// Redis outlives a crashed supervisor, which the next one adopts: see
	// the notes above.
	p, err := startChild(cmd, survivesSupervisor, &s.wg)
	if err != nil {
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	return p, nil
}

// awaitReady waits until p answers PING (then the node is up and the
// faults that ended with its return are closed), exits, or ctx ends.
func (s *supervisor) awaitReady(ctx context.Context, p *child) {
	s.mu.Lock()
	starting := s.st.State == Starting && s.proc == p
	s.mu.Unlock()
	if !starting {
		return
	}
	logged := false
	down, ok := awaitAnswer(ctx, p, func(ctx context.Context) error {
		err := s.direct.Ping(ctx).Err()
		// A refused login (wrong credentials) would otherwise look like a
		// node that never comes up.
		var reply redis.Error
		if !logged && errors.As(err, &reply) && !strings.HasPrefix(err.Error(), "LOADING") {
			s.log.Printf("redis-server answers PING with an error: %v", err)
			logged = true
		}
		return err
	})
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != p || s.st.State != Starting {
		return
	}
	s.setStateLocked(Up)
	if !s.crashedAt.IsZero() {
		s.lastDowntime, s.crashedAt = time.Since(s.crashedAt), time.Time{}
	}
	for _, k := range []FaultKind{fault.Kill, fault.PowerLoss, fault.Restart, fault.Stop} {
		s.faults.endAtLocked(k, down, nil)
	}
}

// exitedLocked records that redis-server p ended, cleanly (a stop or
// restart asked for it) or not (a crash, counted as a restart when the node
// should be up), and moves the node to waiting or stopped.
func (s *supervisor) exitedLocked(p *child, clean bool) {
	if !clean && s.wantUp {
		s.st.Restarts++
		s.crashedAt = time.Now()
	}
	s.stopping = false
	s.proc = nil
	s.st.RedisPID = 0
	s.st.LastExit = p.exit
	if s.paused.proc == p {
		s.stopPauseLocked()
	}
	if s.wantUp {
		s.setStateLocked(Waiting)
	} else {
		s.setStateLocked(Stopped)
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
// anything can start redis-server again), and tells the restart guard.
func (s *supervisor) onExit(p *child) {
	s.mu.Lock()
	cut := s.pendingCut
	if cut != nil && cut.proc == p {
		s.pendingCut = nil
	} else {
		cut = nil
	}
	clean := s.stopping && !p.killed
	s.exitedLocked(p, clean)
	s.mu.Unlock()
	os.Remove(s.spec.path(redisPIDFile))

	s.log.Printf("redis-server pid %d ended (%s): %s", p.pid, cleanness(clean), p.exit)
	if cut != nil {
		s.applyPowerLoss(cut)
	}
	gctx, cancel := context.WithTimeout(context.Background(), guardTimeout)
	defer cancel()
	if err := s.guard(gctx, nil, "post-stop", cleanness(clean)); err != nil {
		s.log.Printf("post-stop: %v", err)
	}
}

// stopProc asks p to shut down cleanly (SIGTERM: redis-server runs its
// SHUTDOWN path, fsyncing the AOF) and escalates to SIGKILL after
// stopTimeout. It returns once p is gone.
func (s *supervisor) stopProc(p *child) {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	if p.stop(stopTimeout) {
		s.log.Printf("redis-server pid %d ignored SIGTERM for %v; SIGKILL", p.pid, stopTimeout)
	}
}

// guard runs the rendered restart guard script with bash, in its own
// process group so that cancelling it also ends the sleep it waits in.
func (s *supervisor) guard(ctx context.Context, delay *time.Duration, args ...string) error {
	cmd := exec.Command("bash", append([]string{s.spec.path(guardFile)}, args...)...)
	cmd.Dir = s.spec.dir()
	cmd.Env = os.Environ()
	if delay != nil {
		cmd.Env = append(cmd.Env, "REDIS_GUARD_DELAY="+strconv.FormatFloat(delay.Seconds(), 'f', -1, 64))
	}
	cmd.Stdout, cmd.Stderr = s.log.Writer(), s.log.Writer()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("restart guard %v: %w", args, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("restart guard %v: %w", args, err)
		}
		return nil
	case <-ctx.Done():
		signalGroup(cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return ctx.Err()
	}
}

// signalGroup signals pid's process group when pid leads one (redis-server
// and the guard do, so their children get it too), else pid alone.
func signalGroup(pid int, sig syscall.Signal) {
	if pid <= 0 {
		return
	}
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
		_ = syscall.Kill(-pid, sig)
		return
	}
	_ = syscall.Kill(pid, sig)
}

// setStateLocked changes the state, persists node.json and wakes waiters.
func (s *supervisor) setStateLocked(st State) {
	if s.st.State != st {
		s.st.State = st
		s.st.Since = time.Now()
	}
	s.saveLocked()
}

func (s *supervisor) saveLocked() {
	if err := atomicfile.WriteJSON(s.spec.path(statusFile), s.st, 0o644); err != nil {
		s.log.Printf("save status: %v", err)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *supervisor) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// waitFor blocks until ok(status) holds or ctx ends.
func (s *supervisor) waitFor(ctx context.Context, ok func(Status) bool) error {
	for {
		s.mu.Lock()
		st, ch := s.st, s.changed
		s.mu.Unlock()
		if ok(st) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("node %d still %s: %w", s.spec.ID, st.State, ctx.Err())
		}
	}
}

func (s *supervisor) status() Status {
	s.mu.Lock()
	st := s.st
	st.Active = make(map[FaultKind]string, len(s.st.Active))
	for k, v := range s.st.Active {
		st.Active[k] = v
	}
	st.Until = maps.Clone(s.st.Until)
	if s.st.Replica != nil {
		r := *s.st.Replica
		st.Replica = &r
	}
	s.mu.Unlock()
	return st
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

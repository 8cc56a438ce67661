package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/infra/fault"
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

// supervisor runs one node: a daemon (daemon.go) whose process is
// redis-server, started through the restart guard, with a replica or as a
// machine.
type supervisor struct {
	daemon
	spec   Spec
	conf   redisConf
	proxy  *proxy        // the front
	direct *redis.Client // the private redis port, bypassing the proxy
	auth   User          // how the supervisor logs in to its redis-servers
	rep    *replicaSet   // nil unless the node has a replica
	mach   *machineNode  // nil unless the node is a machine

	// Guarded by mu.
	st          Status
	rateStop    context.CancelFunc
	failingOver bool // a failover is swapping the pair's roles
}

var _ daemonKind = (*supervisor)(nil)

// Run runs the supervisor of node id from the spec on disk in
// stateDir/nodeN (written by Prepare) until ctx ends, then stops
// redis-server cleanly, tells the restart guard, stops the proxy and the
// control endpoint and removes its pid files. Log lines go to logw.
func Run(ctx context.Context, stateDir string, id int, logw io.Writer) error {
	spec, err := LoadSpec(stateDir, id)
	if err != nil {
		return err
	}
	auth, err := redisAuth(spec)
	if err != nil {
		return err
	}
	s := &supervisor{spec: spec, conf: spec.hostConf(), auth: auth}
	c := nodeDaemon(spec.StateDir, id)
	c.controlPort = spec.ControlPort
	s.setup(s, c, logw, &s.st.DaemonStatus, &s.st.RedisPID, &s.st, newRecorder(spec.StateDir, spec.ID))
	s.persistence, s.acked = s.conf.persistence(), func() int64 { return aofWrites(s.conf) }
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
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

	s.restoreStatus()
	// The front leads to the pair's master: the original redis-server, or
	// its replica after a failover.
	upstream := redisAddr
	if spec.hasReplica() {
		upstream = s.masterAddr()
	}
	if s.proxy, err = s.addFront(fmt.Sprintf("node%d", id), spec.Port, upstream); err != nil {
		return err
	}
	defer s.closeFronts()
	s.armFronts()
	if spec.Machine == nil {
		if stop := s.redirectFront(ctx, spec.Port); stop != nil {
			defer stop()
		}
	}
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

	if err := s.serve(ctx, s.handler()); err != nil {
		return err
	}

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
		s.wg.Go(func() { s.superviseReplica(ctx) })
		s.wg.Go(func() { s.reconcileRoles(ctx) })
		s.log.Printf("replica: 127.0.0.1:%d follows through 127.0.0.1:%d", spec.ReplicaPort, spec.ReplicaLinkPort)
	}
	s.log.Printf("supervising: proxy 127.0.0.1:%d -> redis %s, control 127.0.0.1:%d", spec.Port, redisAddr, spec.ControlPort)
	if s.mach != nil {
		s.machineLoop(ctx)
	} else {
		s.loop(ctx)
	}
	s.stopClockRate()
	s.end()
	return nil
}

// restoreStatus carries the counters, the stopped state and the network
// faults over from a previous supervisor of this node (daemon.restore),
// and the replica's promotion and restarts.
func (s *supervisor) restoreStatus() {
	var old Status
	_ = readJSONFile(s.spec.path(statusFile), &old)
	s.restore(old.DaemonStatus)
	s.st.Port, s.st.RedisPort, s.st.Persistence = s.spec.Port, s.spec.RedisPort, s.conf.persistence()
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
	s.endRestored(fault.Failover, restartNote)
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
		s.endRestored(fault.Pause, nil)
		p := adoptChild(pid, &s.wg)
		s.mu.Lock()
		s.proc = p
		s.st.RedisPID = pid
		s.setStateLocked(Starting)
		s.mu.Unlock()
		_ = writePID(s.spec.path(redisPIDFile), pid)
	}
}

// hold runs the restart guard's pre-start, which holds the restart delay
// (override: REDIS_GUARD_DELAY instead). A brand-new node waits nothing.
func (s *supervisor) hold(ctx context.Context, override *time.Duration) error {
	if override == nil && fileExists(s.spec.path(freshMarker)) {
		zero := time.Duration(0)
		override = &zero
	}
	return s.guard(ctx, override, "pre-start")
}

// exec starts redis-server, once the guard let it through.
func (s *supervisor) exec() (*child, error) {
	// Only the very first start of a new node skips the delay.
	os.Remove(s.spec.path(freshMarker))
	p, err := s.startRedis(confFile)
	if err != nil {
		s.exited(nil, false)
		return nil, err
	}
	return p, nil
}

// exited tells the restart guard how redis-server stopped (post-stop), so
// that the next pre-start holds the restart delay after a crash.
func (s *supervisor) exited(_ *child, clean bool) {
	gctx, cancel := context.WithTimeout(context.Background(), guardTimeout)
	defer cancel()
	if err := s.guard(gctx, nil, "post-stop", cleanness(clean)); err != nil {
		s.log.Printf("post-stop: %v", err)
	}
}

// startedLocked: a started node answers.
func (s *supervisor) startedLocked() bool { return s.st.State == Up || s.st.State == Paused }

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
	// `supervised auto` would talk to a systemd that does not supervise it.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "NOTIFY_SOCKET=") })
	// Redis outlives a crashed supervisor, which the next one adopts: see
	// the notes above.
	return s.run(cmd, survivesSupervisor)
}

// prober PINGs redis-server on its private port.
func (s *supervisor) prober() func(context.Context) error {
	logged := false
	return func(ctx context.Context) error {
		err := s.direct.Ping(ctx).Err()
		// A refused login (wrong credentials) would otherwise look like a
		// node that never comes up.
		var reply redis.Error
		if !logged && errors.As(err, &reply) && !strings.HasPrefix(err.Error(), "LOADING") {
			s.log.Printf("redis-server answers PING with an error: %v", err)
			logged = true
		}
		return err
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
		return fmt.Errorf("restart guard %s: %w", strings.Join(args, " "), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("restart guard %s: %w", strings.Join(args, " "), err)
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

func (s *supervisor) status() Status {
	s.mu.Lock()
	st := s.st
	st.DaemonStatus = s.st.clone()
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

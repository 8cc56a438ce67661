package node

import (
	"context"
	"errors"
	"fmt"
	"log"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/machine"
	"github.com/redlocklab/redlocklab/internal/proc"
)

// A machine node (Spec.Machine, Config.Machines) is a Debian 12
// systemd-nspawn machine booted from the node's cloud-init user data, so
// that redlock-redis.service, chrony and the restart guard run under real
// systemd. Its supervisor keeps the fault front, the control endpoint and
// the fault records, and owns the machine: it boots it, and the machine
// dies with it (infra/machine). It also serves the machine's chrony its
// only NTP source, a `chronyd -x` on the node's NTPAddress, started before
// the first boot and stopped after the machine is gone: one server per
// node, so that nothing outlives the supervisor and a lab has no process
// of its own to track.
//
// What the faults do on a machine:
//
//   - kill: SIGKILL of redis-server's host PID; systemd restarts it
//     through the guard, which waits the restart delay (unclean stop).
//   - restart: `systemctl restart` (a clean stop, so it starts at once);
//     only a delay of 0 is supported.
//   - power-loss: Machine.PowerCut, then the power cut of the node's data
//     volume, its power-loss filesystem (machinedisk.go): only what
//     redis-server fsynced survives; then a boot: the guard waits, since
//     the boot marker on tmpfs is gone.
//   - stop / start: `systemctl stop` / `systemctl start`.
//   - pause: SIGSTOP / SIGCONT of the host PID.
//   - partition, heal, latency: at the front, as in the process lab.
//   - clock-jump, clock-rate and failover are refused (ErrUnsupported; the
//     reasons are the catalogue's, package fault).
//
// The supervisor sees redis-server as the child of the machine's systemd
// named redis-server; the node is up once it answers PING through the
// machine's address, and the crash faults end at the last instant it was
// seen not answering, as in the process lab.

// machineUnit is the unit infra/modules/redis-node installs (its unit_name
// output).
const machineUnit = "redlock-redis.service"

// ErrUnsupported is returned for a fault a machine node cannot apply; it is
// returned before anything changes.
var ErrUnsupported = errors.New("node: not supported on machine nodes")

// machineBootTimeout bounds one boot, up to systemd answering.
const machineBootTimeout = 5 * time.Minute

// machineNode is the machine-mode part of a supervisor.
type machineNode struct {
	m     *machine.Machine
	ntp   *NTPServer
	netns string // the machine's own network namespace, if any (machinenet.go)

	// power is held by a power loss from its cut until the loop has seen
	// it, and by a boot: the machine boots again only once its disk is
	// what the power loss left. A one-slot semaphore, so that a wait for
	// it can end with ctx.
	power chan struct{}

	// Guarded by the supervisor's mu.
	leader int // the machine's systemd as this host sees it; 0 when off
	boots  int
}

// machineRoot is where the machine's root is mounted on the host: the
// rendered paths (/var/lib/redis) are below it.
func machineRoot(spec Spec) string { return filepath.Join(spec.path(machineDir), "root") }

// newMachineNode ends what a previous supervisor of the node left (its
// machine and NTP server), starts the NTP server and prepares the machine;
// nothing boots yet.
func newMachineNode(ctx context.Context, spec Spec, logger *log.Logger) (*machineNode, error) {
	dir := spec.path(machineDir)
	if err := sweepMachine(ctx, spec.dir()); err != nil {
		return nil, err
	}
	img, err := machine.EnsureImage(ctx, machine.ImageConfig{Log: logger.Writer()})
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", spec.ID, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	files, err := sshFiles(spec.Machine)
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", spec.ID, err)
	}
	cfg := machine.Config{
		Name:     "redlab-" + strconv.Itoa(spec.Port),
		Image:    img,
		Dir:      dir,
		UserData: spec.Machine.UserData,
		Files:    files,
		Binds:    machineBinds(spec),
	}
	if ns := spec.Machine.Netns; ns != "" {
		cfg.NetNS = netnsPath(ns)
	}
	m, err := machine.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("node %d: %w", spec.ID, err)
	}
	if spec.Machine.Netns != "" {
		if err := setupNetns(ctx, spec.Machine); err != nil {
			return nil, fmt.Errorf("node %d: %w", spec.ID, err)
		}
	}
	ntp, err := StartNTPServer(ctx, spec.Machine.NTPAddress, ntpAllow(spec.Machine), spec.path(ntpDir), logger)
	if err != nil {
		_ = deleteNetns(context.WithoutCancel(ctx), spec.Machine.Netns)
		return nil, fmt.Errorf("node %d: %w", spec.ID, err)
	}
	return &machineNode{m: m, ntp: ntp, netns: spec.Machine.Netns, power: make(chan struct{}, 1)}, nil
}

// ntpDir holds a machine node's NTP server's configuration and pid file.
const ntpDir = "ntp"

// close stops the machine (an orderly shutdown, then a power cut), unmounts
// its root, stops the NTP server and deletes the machine's network
// namespace. It is idempotent.
func (mn *machineNode) close() error {
	err := mn.m.Close()
	mn.ntp.Stop()
	return errors.Join(err, deleteNetns(context.Background(), mn.netns))
}

// sweepMachine ends a machine node's leftovers in Dir: the machine
// (infra/machine.Sweep), the NTP server, found by its configuration's
// path, and the machine's network namespace, by the name in its spec.
func sweepMachine(ctx context.Context, Dir string) error {
	conf := filepath.Join(Dir, ntpDir, "chrony.conf")
	for _, pid := range findMentioning(conf) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		proc.WaitGone(context.Background(), pid, 5*time.Second)
	}
	if err := machine.Sweep(ctx, filepath.Join(Dir, machineDir)); err != nil {
		return err
	}
	return deleteNetns(ctx, specNetns(Dir))
}

// lockPower takes mn.power, or gives up when ctx ends.
func (mn *machineNode) lockPower(ctx context.Context) error {
	select {
	case mn.power <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (mn *machineNode) unlockPower() { <-mn.power }

// redisPID returns the host PID of the machine's redis-server: a child of
// its systemd (the unit's main process) named redis-server; 0 when there
// is none (the guard waiting, the unit stopped).
func redisPID(leader int) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", leader))
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			// A zombie that systemd has not reaped yet is a process gone.
			if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(comm)) == "redis-server" && proc.Alive(pid) {
				return pid
			}
		}
	}
	return 0
}

// machineLoop boots the machine whenever it is off, follows its
// redis-server (found, answering, gone) until ctx ends, then stops the
// machine. It is the machine-mode loop.
func (s *supervisor) machineLoop(ctx context.Context) {
	mn := s.mach
	quit := make(chan struct{}) // ends the PID watchers
	defer func() {
		if err := mn.m.Close(); err != nil {
			s.log.Printf("machine: %v", err)
		}
		close(quit)
	}()
	// lastNone is the last instant redis-server was seen not running: a
	// process found after it started after it.
	lastNone := time.Now()
	for {
		s.mu.Lock()
		p, want, leader := s.proc, s.wantUp, mn.leader
		s.mu.Unlock()
		switch {
		case leader == 0:
			if err := s.bootMachine(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Printf("machine boot: %v", err)
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
					return
				}
			}
		case p != nil:
			s.awaitReady(ctx, p)
			select {
			case <-p.done:
				s.onMachineExit(p)
				lastNone = time.Now()
			case <-ctx.Done():
				return
			}
		default:
			if mn.m.Leader() == 0 { // it powered off by itself
				s.mu.Lock()
				mn.leader = 0
				s.mu.Unlock()
				s.log.Printf("machine: off without a power loss; booting it again")
				continue
			}
			before := time.Now()
			if pid := redisPID(leader); pid != 0 {
				np := s.watchPID(pid, lastNone, quit)
				_ = writePID(s.spec.path(redisPIDFile), pid)
				s.mu.Lock()
				s.proc = np
				s.st.RedisPID = pid
				s.setStateLocked(Starting)
				s.mu.Unlock()
				s.log.Printf("redis-server runs, host pid %d", pid)
				continue
			}
			lastNone = before
			s.mu.Lock()
			switch {
			case !want && s.st.State != Stopped:
				s.setStateLocked(Stopped)
			case want && s.st.State != Waiting:
				s.setStateLocked(Waiting)
			}
			s.mu.Unlock()
			select {
			case <-s.wake:
			case <-ctx.Done():
				return
			case <-time.After(2 * pollInterval):
			}
		}
	}
}

// bootMachine boots the machine, after any power loss has cut its disk.
func (s *supervisor) bootMachine(ctx context.Context) error {
	mn := s.mach
	if err := mn.lockPower(ctx); err != nil {
		return err
	}
	defer mn.unlockPower()
	bctx, cancel := context.WithTimeout(ctx, machineBootTimeout)
	defer cancel()
	start := time.Now()
	if err := mn.m.Start(bctx); err != nil {
		return err
	}
	leader := mn.m.Leader()
	s.mu.Lock()
	mn.leader = leader
	mn.boots++
	boots := mn.boots
	s.mu.Unlock()
	s.log.Printf("machine %s booted (boot %d) in %v, systemd host pid %d", mn.m.Name(), boots, time.Since(start).Round(time.Millisecond), leader)
	return nil
}

// watchPID follows a redis-server of the machine: it is not this process's
// child, so its end is found by polling. started is the last instant it was
// known not to run.
func (s *supervisor) watchPID(pid int, started time.Time, quit <-chan struct{}) *child {
	p := &child{pid: pid, adopted: true, started: started, done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(p.done)
		for proc.Alive(pid) {
			select {
			case <-quit:
				p.exit = "supervisor stopped"
				return
			case <-time.After(pollInterval):
			}
		}
		p.exit = "exited (under systemd)"
	}()
	return p
}

// onMachineExit records that the machine's redis-server is gone: a crash
// unless a stop or restart asked for it. systemd, not the supervisor,
// restarts it.
func (s *supervisor) onMachineExit(p *child) {
	s.mu.Lock()
	clean := s.stopping
	s.exitedLocked(p, clean)
	s.mu.Unlock()
	os.Remove(s.spec.path(redisPIDFile))
	s.log.Printf("redis-server host pid %d ended (%s): %s", p.pid, cleanness(clean), p.exit)
}

// systemctl runs systemctl in the machine.
func (s *supervisor) systemctl(ctx context.Context, args ...string) error {
	out, err := s.mach.m.Exec(ctx, append([]string{"systemctl"}, args...)...)
	if err != nil {
		return fmt.Errorf("node %d: %w%s", s.spec.ID, err, out)
	}
	return nil
}

// machineRunningLocked fails when the machine is off (booting after a
// power loss).
func (s *supervisor) machineRunningLocked() error {
	if s.mach.leader == 0 {
		return fmt.Errorf("%w on node %d (its machine is off)", ErrNotRunning, s.spec.ID)
	}
	return nil
}

func (s *supervisor) machineRestart(ctx context.Context, _ fault.Params) (fault.Result, error) {
	s.mu.Lock()
	if err := s.machineRunningLocked(); err != nil {
		s.mu.Unlock()
		return fault.Result{}, err
	}
	params := notes(ctx)
	params["delay"] = "0s"
	f := s.faults.startLocked(fault.Restart, params)
	if s.proc != nil {
		s.stopping = true
	}
	s.wantUp = true
	s.mu.Unlock()
	// Returns once the unit is active again (Type=notify).
	if err := s.systemctl(ctx, "restart", machineUnit); err != nil {
		return fault.Result{}, err
	}
	s.poke()
	return recorded(&f), nil
}

func (s *supervisor) machineStop(ctx context.Context, _ fault.Params) (fault.Result, error) {
	s.mu.Lock()
	if !s.wantUp && s.proc == nil {
		s.mu.Unlock()
		return fault.Result{}, nil
	}
	if err := s.machineRunningLocked(); err != nil {
		s.mu.Unlock()
		return fault.Result{}, err
	}
	s.wantUp = false
	f := s.faults.startLocked(fault.Stop, notes(ctx))
	if s.proc != nil {
		s.stopping = true
	}
	s.mu.Unlock()
	if err := s.systemctl(ctx, "stop", machineUnit); err != nil {
		return fault.Result{}, err
	}
	s.poke()
	err := s.waitFor(ctx, func() bool { return s.st.State == Stopped })
	return recorded(&f), err
}

func (s *supervisor) machineStart(ctx context.Context, _ fault.Params) (fault.Result, error) {
	s.mu.Lock()
	if err := s.machineRunningLocked(); err != nil {
		s.mu.Unlock()
		return fault.Result{}, err
	}
	s.wantUp = true
	s.mu.Unlock()
	if err := s.systemctl(ctx, "start", "--no-block", machineUnit); err != nil {
		return fault.Result{}, err
	}
	s.poke()
	err := s.waitFor(ctx, s.startedLocked)
	return fault.Result{}, err
}

// machinePowerLoss cuts the machine's power, then its data volume's (what
// was not fsynced is lost), and leaves the boot to the loop. It returns
// once the cut is done.
func (s *supervisor) machinePowerLoss(ctx context.Context, _ fault.Params) (fault.Result, error) {
	mn := s.mach
	s.mu.Lock()
	p, err := s.powerLossTargetLocked()
	s.mu.Unlock()
	if err != nil {
		return fault.Result{}, err
	}
	// The loop boots only with power held: not before the disk is cut.
	if err := mn.lockPower(ctx); err != nil {
		return fault.Result{}, err
	}
	defer mn.unlockPower()
	s.mu.Lock()
	if s.proc != p || mn.leader == 0 {
		err := s.notRunningLocked()
		s.mu.Unlock()
		return fault.Result{}, err
	}
	cut := &powerCut{proc: p, crash: time.Now(), done: make(chan struct{})}
	f := s.faults.startLocked(fault.PowerLoss, s.powerLossNote(notes(ctx)))
	mn.leader = 0
	s.mu.Unlock()

	if err := mn.m.PowerCut(ctx); err != nil {
		return fault.Result{}, err
	}
	s.log.Printf("machine %s: power cut", mn.m.Name())
	s.applyPowerLoss(cut)
	if cut.err != nil {
		return fault.Result{}, cut.err
	}
	// Return once the loop has seen the crash, as the process lab does.
	if err := s.waitFor(ctx, func() bool { return s.st.RedisPID != p.pid }); err != nil {
		return fault.Result{}, err
	}
	maps.Copy(f.Params, powerLossParams(cut.res))
	r := recorded(&f)
	r.PowerLoss = &cut.res
	return r, nil
}

// NTPServer is a chronyd serving this host's time on one loopback address,
// never touching the host's clock (-x): a machine's only NTP source.
type NTPServer struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// StartNTPServer runs chronyd -x as an NTP server on addr:123 for the
// clients in network allow, with its configuration and pid file in dir,
// and returns once its socket is bound. It dies with the calling process
// (Pdeathsig).
func StartNTPServer(ctx context.Context, addr, allow, dir string, logger *log.Logger) (*NTPServer, error) {
	bin, err := exec.LookPath("chronyd")
	if err != nil {
		return nil, fmt.Errorf("node: the machines' NTP server: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	conf := filepath.Join(dir, "chrony.conf")
	text := strings.Join([]string{
		"# The NTP source of one lab machine (infra/lab): this host's time, served",
		"# on an address of its own; no command sockets, no clock control.",
		"bindaddress " + addr,
		"port 123",
		"cmdport 0",
		"bindcmdaddress /",
		"local stratum 8",
		"allow " + allow,
		"pidfile " + filepath.Join(dir, "chronyd.pid"),
		"",
	}, "\n")
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	cmd := exec.Command(bin, "-x", "-d", "-u", "root", "-f", conf)
	cmd.Stdout, cmd.Stderr = logger.Writer(), logger.Writer()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("node: start chronyd: %w", err)
	}
	n := &NTPServer{cmd: cmd, done: make(chan struct{})}
	go func() { // owned by n: ends when chronyd exits, which Stop makes sure of
		_ = cmd.Wait()
		close(n.done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Read, not probed by binding: a probe that holds the socket as
		// chronyd binds it makes chronyd fail.
		if udpBound(addr, 123) {
			return n, nil
		}
		select {
		case <-n.done:
			return nil, fmt.Errorf("node: chronyd on %s exited at start (see the supervisor's log)", addr)
		case <-ctx.Done():
			n.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.Stop()
			return nil, fmt.Errorf("node: chronyd did not bind %s:123 within 10s", addr)
		}
	}
}

// Stop ends chronyd (SIGTERM, then SIGKILL) and waits for it. Idempotent.
func (n *NTPServer) Stop() {
	if n == nil {
		return
	}
	select {
	case <-n.done:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(5 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
}

// ErrMachineHost is returned by CheckMachineHost and by Up with
// Config.Machines on a host that cannot run machine nodes.
var ErrMachineHost = errors.New("node: this host cannot run machine nodes")

// CheckMachineHost reports what this host lacks to run machine nodes: root
// (overlay mounts, systemd-nspawn), systemd-nspawn, nsenter, chronyd (the
// machines' NTP source) and debootstrap (to build the image the first
// time).
func CheckMachineHost() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (overlay mounts and systemd-nspawn)")
	}
	for _, prog := range []string{"systemd-nspawn", "nsenter", "chronyd", "debootstrap"} {
		if _, err := exec.LookPath(prog); err != nil {
			missing = append(missing, prog)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %s (Debian: apt-get install systemd-container util-linux chrony debootstrap)", ErrMachineHost, strings.Join(missing, ", "))
	}
	return nil
}

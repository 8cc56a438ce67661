package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlocklab/redlocklab/internal/proc"
	"io"
	"log"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/internal/etcdstatus"
)

// The etcd member supervisor, `redlab node etcd-run`: the Redis node
// supervisor's semantics where they carry over, and simpler where etcd needs
// less.
//
//   - A crash (any exit not asked for) keeps the member down for the lab's
//     restart delay, as a Redis node's restart guard does, so that a killed
//     leader is gone long enough for the others to elect a new one; the
//     restart fault overrides the delay once. There is no restart guard:
//     etcd fsyncs its raft log before it acknowledges, so a member may
//     restart at once without losing what it acknowledged.
//   - etcd dies with its supervisor (parent-death signal): a member that
//     restarts from its data directory is safe, so there is nothing to
//     adopt, and `lab up` starts a dead supervisor, which starts etcd again.
//   - The fronts: clients reach the member through its client front, the
//     other members through its peer front (the member advertises both).
//     partition and latency act on both, that is on the connections made
//     to this member, not on the ones it makes. etcd's raft streams run
//     both ways: each member reads its peers' messages from the streams it
//     opened to their peer fronts, and writes its own into the streams they
//     opened to it. So a partitioned member still hears its peers, while
//     what it sends goes into streams that stay open and pass nothing (etcd
//     keeps using an open stream, and does not fall back to posting): an
//     asymmetric partition. Its heartbeats stop, the others elect a new
//     leader within an election timeout, and the member, which learns who
//     leads but whose acknowledgements never arrive, commits and applies
//     nothing and serves no linearizable read until heal (TestLabEtcd
//     checks this). A paused member is silent both ways.
//   - Its data directory is the power-loss filesystem (powerfs.go), which
//     the supervisor serves: power-loss SIGKILLs etcd and cuts the disk back
//     to what etcd fsynced (its WAL, before it acknowledges) before the
//     restart delay.
//   - The member is up once it answers a status request on its own client
//     port: etcd serves clients only after it has joined its cluster, so a
//     member without a majority stays starting.
type etcdSupervisor struct {
	spec   EtcdMemberSpec
	log    *log.Logger
	faults faultBook // its status's Active, and faults.jsonl
	client *proxy    // the client front
	peer   *proxy    // the peer front
	url    string    // etcd's own client URL, bypassing the front

	mu           sync.Mutex
	st           EtcdMemberStatus
	proc         *child // the etcd process
	wantUp       bool
	stopping     bool           // the current process was asked to stop
	pendingDelay time.Duration  // the wait before the next start
	override     *time.Duration // the restart fault's delay for the next crash
	cancelWait   context.CancelFunc
	paused       pauseTimer
	timers       deadlines // partitions and latency given a `for`
	disk         disk      // the data directory as the power-loss filesystem
	pendingCut   *powerCut // a power loss waiting for its process to die
	wake         chan struct{}
	changed      chan struct{}

	wg sync.WaitGroup
}

// EtcdMemberStatus is one etcd member's state as its supervisor sees it.
type EtcdMemberStatus struct {
	ID            int       `json:"id"`
	State         State     `json:"state"`
	SupervisorPID int       `json:"supervisor_pid,omitempty"`
	EtcdPID       int       `json:"etcd_pid,omitempty"`
	Restarts      int       `json:"restarts"`
	ClientPort    int       `json:"client_port"`
	PeerPort      int       `json:"peer_port"`
	ControlPort   int       `json:"control_port"`
	Partitioned   bool      `json:"partitioned,omitempty"`
	Latency       Duration  `json:"latency,omitempty"`
	Jitter        Duration  `json:"jitter,omitempty"`
	LastExit      string    `json:"last_exit,omitempty"`
	Since         time.Time `json:"since"`
	// Active maps each fault in effect on the member to its ID in
	// faults.jsonl.
	Active map[FaultKind]string `json:"active_faults,omitempty"`
	// Until is when each active fault given a `for` ends (deadline.go).
	Until map[FaultKind]time.Time `json:"fault_until,omitempty"`
	// What etcd itself said when the status was taken (empty when it did
	// not answer): its member ID, the ID of the leader it follows (its own
	// when it believes it leads) and its raft term. IDs in hex, as etcdctl
	// prints them.
	MemberID string `json:"member_id,omitempty"`
	Leader   string `json:"leader,omitempty"`
	RaftTerm uint64 `json:"raft_term,omitempty"`
}

// RunEtcdMember runs the supervisor of etcd member id from the spec on disk
// in stateDir/etcdM (written by PrepareEtcdMember) until ctx ends, then
// stops etcd cleanly, stops the fronts and the control endpoint and removes
// its pid files. Log lines go to logw.
func RunEtcdMember(ctx context.Context, stateDir string, id int, logw io.Writer) error {
	spec, err := LoadEtcdMemberSpec(stateDir, id)
	if err != nil {
		return err
	}
	// The lab's owner going ends the supervisor as ctx would (owner.go).
	ctx, endForOwner := context.WithCancel(ctx)
	defer endForOwner()
	if pid := readPID(spec.path(supervisorPIDFile)); pid != os.Getpid() && isEtcdSupervisor(pid, spec.StateDir, spec.ID) {
		return fmt.Errorf("node: etcd member %d: a supervisor is already running (pid %d)", id, pid)
	}
	if logw == nil {
		logw = io.Discard
	}
	s := &etcdSupervisor{
		spec:    spec,
		log:     log.New(logw, fmt.Sprintf("etcd%d ", id), log.LstdFlags|log.Lmicroseconds),
		url:     "http://127.0.0.1:" + strconv.Itoa(spec.EtcdClientPort),
		wantUp:  true,
		wake:    make(chan struct{}, 1),
		changed: make(chan struct{}),
	}
	s.faults = faultBook{rec: newEtcdRecorder(spec.StateDir, spec.ID), log: s.log, active: &s.st.Active, save: s.saveLocked}
	s.timers = deadlines{mu: &s.mu, wg: &s.wg, until: &s.st.Until, end: s.endTimedLocked}
	if err := writePID(spec.path(supervisorPIDFile), os.Getpid()); err != nil {
		return fmt.Errorf("node: etcd member %d: %w", id, err)
	}
	defer os.Remove(spec.path(supervisorPIDFile))
	s.restoreStatus()

	name := fmt.Sprintf("etcd%d", id)
	if s.client, err = startProxy(name+" client", "127.0.0.1:"+strconv.Itoa(spec.ClientPort), "127.0.0.1:"+strconv.Itoa(spec.EtcdClientPort)); err != nil {
		return err
	}
	defer s.client.Stop()
	if s.peer, err = startProxy(name+" peer", "127.0.0.1:"+strconv.Itoa(spec.PeerPort), "127.0.0.1:"+strconv.Itoa(spec.EtcdPeerPort)); err != nil {
		return err
	}
	defer s.peer.Stop()
	s.reapplyNetworkFaults()
	s.mu.Lock()
	s.timers.rearmLocked()
	s.mu.Unlock()

	if err := serveControl(ctx, spec.ControlPort, s.handler(), s.log, &s.wg); err != nil {
		return fmt.Errorf("node: etcd member %d control endpoint: %w", id, err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		watchOwner(ctx, spec.StateDir, s.log, endForOwner)
	}()

	// An etcd of this member still running (its supervisor was SIGKILLed
	// and the parent-death signal did not reach it) would hold the ports.
	for _, pid := range findMentioning(spec.path(etcdConfFile)) {
		s.log.Printf("killing etcd pid %d left by a previous supervisor", pid)
		signalGroup(pid, syscall.SIGKILL)
		proc.WaitGone(context.Background(), pid, 5*time.Second)
	}
	// etcd dies with its supervisor, so there is nothing on a dead mount
	// to kill: mountDisk only sweeps it.
	s.disk = mountDisk(s.dataDir(), spec.PlainDisk, false, s.log, func() []int { return nil })
	defer s.disk.close(s.log)
	s.log.Printf("supervising: client front 127.0.0.1:%d -> %s, peer front 127.0.0.1:%d -> 127.0.0.1:%d, control 127.0.0.1:%d",
		spec.ClientPort, s.url, spec.PeerPort, spec.EtcdPeerPort, spec.ControlPort)
	s.loop(ctx)

	s.mu.Lock()
	s.stopPauseLocked()
	s.timers.stopLocked()
	s.mu.Unlock()
	s.wg.Wait()
	s.endAllFaults()
	os.Remove(spec.path(etcdPIDFile))
	s.mu.Lock()
	s.st.State, s.st.SupervisorPID, s.st.EtcdPID = Down, 0, 0
	s.saveLocked()
	s.mu.Unlock()
	s.log.Printf("supervisor stopped")
	return nil
}

// restoreStatus carries the counters, the stopped state and the network
// faults over from a previous supervisor of this member.
func (s *etcdSupervisor) restoreStatus() {
	var old EtcdMemberStatus
	_ = readJSONFile(s.spec.path(etcdStatus), &old)
	s.st = EtcdMemberStatus{
		ID: s.spec.ID, State: Starting, SupervisorPID: os.Getpid(), Restarts: old.Restarts,
		ClientPort: s.spec.ClientPort, PeerPort: s.spec.PeerPort, ControlPort: s.spec.ControlPort,
		Partitioned: old.Partitioned, Latency: old.Latency, Jitter: old.Jitter,
		LastExit: old.LastExit, Active: old.Active, Until: old.Until, Since: time.Now(),
	}
	if s.st.Active == nil {
		s.st.Active = map[FaultKind]string{}
	}
	endExpired(s.timers.expiredLocked(time.Now()), s.st.Active, s.faults.rec, &s.st.Partitioned, &s.st.Latency, &s.st.Jitter)
	// The pause timer died with the previous supervisor, and its etcd with
	// it.
	if id := s.st.Active[fault.Pause]; id != "" {
		_ = s.faults.rec.end(id, fault.Pause, map[string]string{"ended_by": "supervisor restart"})
		delete(s.st.Active, fault.Pause)
	}
	if old.State == Stopped {
		s.wantUp = false
	}
}

func (s *etcdSupervisor) reapplyNetworkFaults() {
	for _, x := range []*proxy{s.client, s.peer} {
		if s.st.Partitioned {
			_ = x.partition()
		}
		if s.st.Latency > 0 {
			_ = x.latency(time.Duration(s.st.Latency), time.Duration(s.st.Jitter))
		}
	}
}

// loop starts etcd whenever it should run and is not (after the pending
// delay), and handles its exits, until ctx ends; then it stops it cleanly.
func (s *etcdSupervisor) loop(ctx context.Context) {
	// The parent-death signal is sent when the thread that started the
	// child ends, not the process: every start happens on this thread,
	// which lives until the loop returns.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		s.mu.Lock()
		p, want, delay := s.proc, s.wantUp, s.pendingDelay
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
		case delay > 0:
			s.mu.Lock()
			wctx, cancel := context.WithTimeout(ctx, delay)
			s.cancelWait = cancel
			s.setStateLocked(Waiting)
			s.mu.Unlock()
			<-wctx.Done()
			s.mu.Lock()
			s.cancelWait = nil
			if errors.Is(wctx.Err(), context.DeadlineExceeded) {
				s.pendingDelay = 0
			}
			s.mu.Unlock()
			cancel()
			if ctx.Err() != nil {
				return
			}
		default:
			if err := s.start(); err != nil {
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

func (s *etcdSupervisor) start() error {
	cmd := exec.Command(s.spec.EtcdServer, "--config-file", s.spec.path(etcdConfFile))
	cmd.Dir = s.spec.dir()
	cmd.Stdout, cmd.Stderr = s.log.Writer(), s.log.Writer()
	// etcd dies with its supervisor: see the notes above, and loop.
	p, err := startChild(cmd, diesWithSupervisor, &s.wg)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	_ = writePID(s.spec.path(etcdPIDFile), p.pid)
	s.mu.Lock()
	s.proc = p
	s.st.EtcdPID = p.pid
	s.setStateLocked(Starting)
	s.mu.Unlock()
	s.log.Printf("etcd started, pid %d", p.pid)
	return nil
}

// awaitReady waits until p answers a status request on its own client port
// (then the member is up and the crash faults end at the last instant it
// was seen not answering), exits, or ctx ends.
func (s *etcdSupervisor) awaitReady(ctx context.Context, p *child) {
	s.mu.Lock()
	starting := s.st.State == Starting && s.proc == p
	s.mu.Unlock()
	if !starting {
		return
	}
	down, ok := awaitAnswer(ctx, p, func(ctx context.Context) error {
		_, err := etcdstatus.Get(ctx, s.url)
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
	for _, k := range []FaultKind{fault.Kill, fault.Restart, fault.Stop, fault.PowerLoss} {
		s.faults.endAtLocked(k, down, nil)
	}
}

// onExit records how p ended: a crash (not asked for) waits out the restart
// delay, or the restart fault's, before the next start.
func (s *etcdSupervisor) onExit(p *child) {
	s.mu.Lock()
	if cut := s.pendingCut; cut != nil && cut.proc == p {
		// The power cut, before anything can start etcd again.
		s.pendingCut = nil
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		cut.res, cut.err = s.disk.cut(ctx)
		cancel()
		s.log.Printf("power loss (filesystem model): cut %d bytes from %v; vanished %v, returned %v", cut.res.CutBytes, cut.res.CutFiles, cut.res.Vanished, cut.res.Returned)
		close(cut.done)
		s.mu.Lock()
	}
	clean := s.stopping && !p.killed
	if !clean && s.wantUp {
		s.st.Restarts++
		s.pendingDelay = time.Duration(s.spec.RestartDelay)
		if s.override != nil {
			s.pendingDelay = *s.override
		}
	}
	s.override = nil
	s.stopping = false
	s.proc = nil
	s.st.EtcdPID = 0
	s.st.LastExit = p.exit
	if s.paused.proc == p {
		s.stopPauseLocked()
	}
	if s.wantUp {
		s.setStateLocked(Waiting)
	} else {
		s.setStateLocked(Stopped)
	}
	s.mu.Unlock()
	os.Remove(s.spec.path(etcdPIDFile))
	s.log.Printf("etcd pid %d ended (%s): %s", p.pid, cleanness(clean), p.exit)
}

// stopProc asks p to shut down cleanly (SIGTERM) and escalates to SIGKILL
// after stopTimeout. It returns once p is gone.
func (s *etcdSupervisor) stopProc(p *child) {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	if p.stop(stopTimeout) {
		s.log.Printf("etcd pid %d ignored SIGTERM for %v; SIGKILL", p.pid, stopTimeout)
	}
}

func (s *etcdSupervisor) setStateLocked(st State) {
	if s.st.State != st {
		s.st.State = st
		s.st.Since = time.Now()
	}
	s.saveLocked()
}

func (s *etcdSupervisor) saveLocked() {
	st := s.st
	st.MemberID, st.Leader, st.RaftTerm = "", "", 0
	if err := atomicfile.WriteJSON(s.spec.path(etcdStatus), st, 0o644); err != nil {
		s.log.Printf("save status: %v", err)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *etcdSupervisor) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *etcdSupervisor) waitFor(ctx context.Context, ok func(EtcdMemberStatus) bool) error {
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
			return fmt.Errorf("node: etcd member %d still %s: %w", s.spec.ID, st.State, ctx.Err())
		}
	}
}

// status is the supervisor's view, and etcd's own when it answers within a
// moment (a paused or partitioned member's etcd is asked directly, not
// through the fronts, so it answers unless it is paused).
func (s *etcdSupervisor) status(ctx context.Context) EtcdMemberStatus {
	s.mu.Lock()
	st := s.st
	st.Active = make(map[FaultKind]string, len(s.st.Active))
	for k, v := range s.st.Active {
		st.Active[k] = v
	}
	st.Until = maps.Clone(s.st.Until)
	running := s.proc != nil && st.State != Paused
	s.mu.Unlock()
	if running {
		sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if es, err := etcdstatus.Get(sctx, s.url); err == nil {
			st.MemberID, st.RaftTerm = strconv.FormatUint(es.MemberID, 16), es.RaftTerm
			if es.Leader != 0 {
				st.Leader = strconv.FormatUint(es.Leader, 16)
			}
		}
	}
	return st
}

// The control endpoint, as a Redis node's (control.go), with the faults
// that apply to an etcd member:
//
//	GET  /v1/status          -> EtcdMemberStatus
//	POST /v1/faults/{kind}   FaultRequest -> EtcdFaultResult
//
// kind is kill, restart, stop, pause, partition or latency, or "start" or
// "heal". A request's target ("leader" when the lab resolved the leader to
// this member) is recorded with the fault.
func (s *etcdSupervisor) handler() http.Handler {
	return controlMux(s.status, s.apply,
		func(res EtcdFaultResult, st EtcdMemberStatus) EtcdFaultResult { res.Status = st; return res })
}

// EtcdFaultResult is what a member reports after a fault request.
type EtcdFaultResult struct {
	// Fault is the fault started, if the request started one.
	Fault *Fault `json:"fault,omitempty"`
	// Status is the member's status after the request.
	Status EtcdMemberStatus `json:"status"`
	// PowerLoss is set for power-loss.
	PowerLoss *PowerLossResult `json:"power_loss,omitempty"`
}

func (s *etcdSupervisor) apply(ctx context.Context, kind string, req FaultRequest) (EtcdFaultResult, error) {
	if err := CheckFault(kind, req.params, fault.EtcdMember, false); err != nil {
		return EtcdFaultResult{}, err
	}
	params := map[string]string{}
	if req.Target != "" {
		params["target"] = req.Target
	}
	switch kind {
	case string(fault.Kill):
		return s.kill(ctx, nil, params)
	case string(fault.PowerLoss):
		return s.powerLoss(ctx, params)
	case string(fault.Restart):
		d := time.Duration(*req.Delay) // checkFault: given
		params["delay"] = d.String()
		return s.kill(ctx, &d, params)
	case string(fault.Stop):
		return s.stop(ctx, params)
	case string(fault.Start):
		return s.startMember(ctx)
	case string(fault.Pause):
		return s.pause(time.Duration(req.For), params)
	case string(fault.Partition):
		return s.partition(time.Duration(req.For), params), nil
	case string(fault.Heal):
		return s.heal(), nil
	case string(fault.Latency):
		return s.latency(time.Duration(req.Add), time.Duration(req.Jitter), time.Duration(req.For), params), nil
	}
	return EtcdFaultResult{}, fmt.Errorf("%w: %q is not a fault of etcd members", ErrInvalid, kind) // CheckFault refused it first
}

// dataDir is the member's data-dir, from its rendered etcd.yml (Validate
// made sure it is absolute).
func (s *etcdSupervisor) dataDir() string {
	c, _ := parseEtcdConf(s.spec.Conf)
	return c.DataDir
}

// powerLoss is a crash that also loses what etcd had not fsynced: SIGKILL,
// the power cut on its data directory (the power-loss filesystem), then
// the restart delay as after any crash. It returns once the cut is done.
func (s *etcdSupervisor) powerLoss(ctx context.Context, params map[string]string) (EtcdFaultResult, error) {
	s.mu.Lock()
	p := s.proc
	switch {
	case p == nil:
		err := fmt.Errorf("%w on etcd member %d (%s)", ErrNotRunning, s.spec.ID, s.st.State)
		s.mu.Unlock()
		return EtcdFaultResult{}, err
	case s.disk.fs == nil:
		s.mu.Unlock()
		return EtcdFaultResult{}, fmt.Errorf("node: etcd member %d: power loss needs the power-loss filesystem: %w", s.spec.ID, s.disk.err)
	}
	cut := &powerCut{proc: p, crash: time.Now(), done: make(chan struct{})}
	f := s.faults.startLocked(fault.PowerLoss, params)
	s.pendingCut = cut
	s.mu.Unlock()
	signalGroup(p.pid, syscall.SIGKILL)
	select {
	case <-cut.done:
	case <-ctx.Done():
		return EtcdFaultResult{}, ctx.Err()
	}
	if cut.err != nil {
		return EtcdFaultResult{}, cut.err
	}
	s.mu.Lock()
	if s.faults.notes == nil {
		s.faults.notes = map[FaultKind]map[string]string{}
	}
	s.faults.notes[fault.PowerLoss] = powerLossParams(cut.res)
	s.mu.Unlock()
	for k, v := range powerLossParams(cut.res) {
		f.Params[k] = v
	}
	res := cut.res
	return EtcdFaultResult{Fault: &f, PowerLoss: &res}, nil
}

// kill SIGKILLs etcd (a crash). With delay set (the restart fault) the
// member comes back after delay instead of the restart delay. It returns
// once the process is gone.
func (s *etcdSupervisor) kill(ctx context.Context, delay *time.Duration, params map[string]string) (EtcdFaultResult, error) {
	s.mu.Lock()
	p, cancelWait := s.proc, s.cancelWait
	if delay == nil && p == nil {
		err := fmt.Errorf("%w on etcd member %d (%s)", ErrNotRunning, s.spec.ID, s.st.State)
		s.mu.Unlock()
		return EtcdFaultResult{}, err
	}
	kind := fault.Kill
	if delay != nil {
		kind = fault.Restart
		s.wantUp = true
		if p != nil {
			s.override = delay
		} else {
			s.pendingDelay = *delay
		}
	}
	f := s.faults.startLocked(kind, params)
	s.mu.Unlock()
	switch {
	case p != nil:
		signalGroup(p.pid, syscall.SIGKILL)
		if err := s.waitFor(ctx, func(st EtcdMemberStatus) bool { return st.EtcdPID != p.pid }); err != nil {
			return EtcdFaultResult{}, err
		}
	case cancelWait != nil:
		cancelWait() // waiting out a delay: wait the new one instead
	default:
		s.poke()
	}
	return EtcdFaultResult{Fault: &f}, nil
}

// stop shuts etcd down cleanly and keeps it down until start.
func (s *etcdSupervisor) stop(ctx context.Context, params map[string]string) (EtcdFaultResult, error) {
	s.mu.Lock()
	if !s.wantUp && s.proc == nil {
		s.mu.Unlock()
		return EtcdFaultResult{}, nil
	}
	s.wantUp = false
	s.pendingDelay = 0
	f := s.faults.startLocked(fault.Stop, params)
	p, cancelWait := s.proc, s.cancelWait
	s.mu.Unlock()
	if p != nil {
		s.stopProc(p)
	}
	if cancelWait != nil {
		cancelWait()
	}
	s.poke()
	err := s.waitFor(ctx, func(st EtcdMemberStatus) bool { return st.State == Stopped })
	return EtcdFaultResult{Fault: &f}, err
}

// startMember starts a stopped member and returns once etcd runs; it is up
// (and the stop fault ends) once it has rejoined, which needs a majority.
func (s *etcdSupervisor) startMember(ctx context.Context) (EtcdFaultResult, error) {
	s.mu.Lock()
	s.wantUp = true
	s.mu.Unlock()
	s.poke()
	err := s.waitFor(ctx, func(st EtcdMemberStatus) bool { return st.EtcdPID != 0 })
	return EtcdFaultResult{}, err
}

// pause SIGSTOPs etcd for d: its connections stay open, nothing answers.
func (s *etcdSupervisor) pause(d time.Duration, params map[string]string) (EtcdFaultResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || (s.st.State != Up && s.st.State != Paused) {
		return EtcdFaultResult{}, fmt.Errorf("%w on etcd member %d (%s)", ErrNotRunning, s.spec.ID, s.st.State)
	}
	s.stopPauseLocked()
	params["for"] = d.String()
	f := s.faults.startLocked(fault.Pause, params)
	s.paused.start(p, d, &s.wg, func(p *child) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.paused.proc != p {
			return
		}
		s.stopPauseLocked()
		if s.proc == p && s.st.State == Paused {
			s.setStateLocked(Up)
		}
	})
	s.setStateLocked(Paused)
	return EtcdFaultResult{Fault: &f}, nil
}

// stopPauseLocked continues a paused etcd (unless it is gone) and ends the
// pause fault.
func (s *etcdSupervisor) stopPauseLocked() {
	s.paused.stop()
	s.faults.endLocked(fault.Pause, nil)
}

// partition silences both fronts, for d when d > 0 (deadline.go). A
// partition already in place keeps its fault and takes d as its new
// deadline.
func (s *etcdSupervisor) partition(d time.Duration, params map[string]string) EtcdFaultResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.Partitioned {
		s.timers.armLocked(fault.Partition, deadlineOf(d))
		s.saveLocked()
		return EtcdFaultResult{}
	}
	_ = s.client.partition()
	_ = s.peer.partition()
	s.st.Partitioned = true
	if d > 0 {
		params["for"] = d.String()
	}
	s.timers.armLocked(fault.Partition, deadlineOf(d))
	f := s.faults.startLocked(fault.Partition, params)
	return EtcdFaultResult{Fault: &f}
}

func (s *etcdSupervisor) heal() EtcdFaultResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.client.heal()
	s.peer.heal()
	s.st.Partitioned, s.st.Latency, s.st.Jitter = false, 0, 0
	s.timers.cancelLocked(fault.Partition)
	s.timers.cancelLocked(fault.Latency)
	s.faults.endLocked(fault.Partition, nil)
	s.faults.endLocked(fault.Latency, nil)
	s.saveLocked()
	return EtcdFaultResult{}
}

// latency delays both fronts by add ± jitter, for d when d > 0
// (deadline.go); add 0 removes it.
func (s *etcdSupervisor) latency(add, jitter, d time.Duration, params map[string]string) EtcdFaultResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.client.latency(add, jitter)
	_ = s.peer.latency(add, jitter)
	s.timers.cancelLocked(fault.Latency)
	s.faults.endLocked(fault.Latency, nil)
	s.st.Latency, s.st.Jitter = Duration(add), Duration(jitter)
	if add <= 0 {
		s.st.Latency, s.st.Jitter = 0, 0
		s.saveLocked()
		return EtcdFaultResult{}
	}
	params["add"], params["jitter"] = add.String(), jitter.String()
	if d > 0 {
		params["for"] = d.String()
	}
	s.timers.armLocked(fault.Latency, deadlineOf(d))
	f := s.faults.startLocked(fault.Latency, params)
	return EtcdFaultResult{Fault: &f}
}

func (s *etcdSupervisor) endAllFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.endAllLocked("member stop")
	s.st.Partitioned, s.st.Latency, s.st.Jitter = false, 0, 0
	s.st.Until = nil
	s.saveLocked()
}

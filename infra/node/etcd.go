package node

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/internal/etcdstatus"
	"github.com/redlocklab/redlocklab/internal/proc"
)

// The etcd member supervisor, `redlab node etcd-run`: a daemon (daemon.go)
// whose process is etcd, with the Redis node supervisor's semantics where
// they carry over, and simpler where etcd needs less.
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
	daemon
	spec EtcdMemberSpec
	url  string // etcd's own client URL, bypassing the front

	// Guarded by mu.
	st           EtcdMemberStatus
	pendingDelay time.Duration // a crash's restart delay, before the next start
}

var _ daemonKind = (*etcdSupervisor)(nil)

// EtcdMemberStatus is one etcd member's state as its supervisor sees it.
type EtcdMemberStatus struct {
	DaemonStatus
	EtcdPID    int `json:"etcd_pid,omitempty"`
	ClientPort int `json:"client_port"`
	PeerPort   int `json:"peer_port"`
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
	s := &etcdSupervisor{spec: spec, url: "http://127.0.0.1:" + strconv.Itoa(spec.EtcdClientPort)}
	c := etcdDaemon(spec.StateDir, id)
	c.controlPort = spec.ControlPort
	s.setup(s, c, logw, &s.st.DaemonStatus, &s.st.EtcdPID, &s.st, newEtcdRecorder(spec.StateDir, spec.ID))
	ctx, done, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
	var old EtcdMemberStatus
	_ = readJSONFile(spec.path(etcdStatus), &old)
	s.restore(old.DaemonStatus)
	s.st.ClientPort, s.st.PeerPort = spec.ClientPort, spec.PeerPort
	// The pause timer died with the previous supervisor, and its etcd with
	// it.
	s.endRestored(fault.Pause, restartNote)

	defer s.closeFronts()
	name := c.logName
	if _, err := s.addFront(name+" client", spec.ClientPort, "127.0.0.1:"+strconv.Itoa(spec.EtcdClientPort)); err != nil {
		return err
	}
	if _, err := s.addFront(name+" peer", spec.PeerPort, "127.0.0.1:"+strconv.Itoa(spec.EtcdPeerPort)); err != nil {
		return err
	}
	s.armFronts()
	if err := s.serve(ctx, s.handler()); err != nil {
		return err
	}

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
	// The parent-death signal is sent when the thread that started the
	// child ends, not the process: every start happens on this thread (the
	// loop's), which lives until the loop returns.
	runtime.LockOSThread()
	s.loop(ctx)
	runtime.UnlockOSThread()
	s.end()
	return nil
}

// hold waits out the restart delay a crash left (override: the restart
// fault's instead). A stop that cuts it short forgets it: etcd loses
// nothing it acknowledged, so a member started again starts at once.
func (s *etcdSupervisor) hold(ctx context.Context, override *time.Duration) error {
	s.mu.Lock()
	delay := s.pendingDelay
	s.mu.Unlock()
	if override != nil {
		delay = *override
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			s.mu.Lock()
			if !s.wantUp {
				s.pendingDelay = 0
			}
			s.mu.Unlock()
			return ctx.Err()
		}
	}
	s.mu.Lock()
	s.pendingDelay = 0
	s.mu.Unlock()
	return nil
}

// exec starts etcd; it dies with its supervisor (see the notes above, and
// RunEtcdMember).
func (s *etcdSupervisor) exec() (*child, error) {
	return s.run(exec.Command(s.spec.EtcdServer, "--config-file", s.spec.path(etcdConfFile)), diesWithSupervisor)
}

// prober asks etcd for its status on its own client port.
func (s *etcdSupervisor) prober() func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := etcdstatus.Get(ctx, s.url)
		return err
	}
}

// exited holds the next start back for the restart delay after a crash.
func (s *etcdSupervisor) exited(_ *child, clean bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !clean && s.wantUp {
		s.pendingDelay = time.Duration(s.spec.RestartDelay)
	}
}

// startedLocked: a started member runs etcd; it is up once it has rejoined
// its cluster, which needs a majority.
func (s *etcdSupervisor) startedLocked() bool { return s.st.EtcdPID != 0 }

// status is the supervisor's view, and etcd's own when it answers within a
// moment (a paused or partitioned member's etcd is asked directly, not
// through the fronts, so it answers unless it is paused).
func (s *etcdSupervisor) status(ctx context.Context) EtcdMemberStatus {
	s.mu.Lock()
	st := s.st
	st.DaemonStatus = s.st.clone()
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
//	GET  /v1/status                       -> EtcdMemberStatus
//	POST /v1/faults/{kind}[?target=NOTE]  fault.Params -> EtcdFaultResult
//
// kind is one the catalogue gives etcd members (fault.EtcdMember). A
// request's target ("leader" when the lab resolved the leader to this
// member) is recorded with the fault.
func (s *etcdSupervisor) handler() http.Handler {
	return controlMux(s.status, s,
		func(res fault.Result, st EtcdMemberStatus) any {
			return EtcdFaultResult{Result: st.stamp(res), Status: st}
		})
}

// EtcdFaultResult is a member's answer to a fault request: what the fault
// did (Target and State are the member's), and its status after it.
type EtcdFaultResult struct {
	fault.Result
	Status EtcdMemberStatus `json:"status"`
}

// dataDir is the member's data-dir, from its rendered etcd.yml (Validate
// made sure it is absolute).
func (s *etcdSupervisor) dataDir() string {
	c, _ := parseEtcdConf(s.spec.Conf)
	return c.DataDir
}

package lab

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/node"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/internal/etcdstatus"
)

// TargetLeader, as the member of an etcd fault, is the member that leads
// when the fault fires: the lab asks the members which one leads (a
// majority must name it, see etcdstatus.Leader), sends the fault to that
// member, and the fault's record says which member it was ("etcd_member")
// and that it was chosen as the leader ("target": "leader").
const TargetLeader = 0

// ErrNoEtcd is returned by the etcd methods of a lab without etcd members.
var ErrNoEtcd = errors.New("lab: no etcd members in this lab (lab up --etcd 3)")

// EtcdMembers returns the lab's etcd members, in order; none without
// Config.Etcd.
func (l *Lab) EtcdMembers() []EtcdMember { return append([]EtcdMember(nil), l.f.EtcdMembers...) }

// EtcdEndpoints returns the members' client URLs through their fronts, in
// order: the endpoints of a clientv3.Config, and the value of REDLAB_ETCD.
func (l *Lab) EtcdEndpoints() []string {
	out := make([]string, len(l.f.EtcdMembers))
	for i, m := range l.f.EtcdMembers {
		out[i] = "http://" + m.Client
	}
	return out
}

// etcdDirectURLs are the members' own client URLs, bypassing the fronts, so
// that what the lab reports is not bent by its own network faults.
func (l *Lab) etcdDirectURLs() []string {
	out := make([]string, len(l.f.EtcdMembers))
	for i, m := range l.f.EtcdMembers {
		out[i] = "http://" + m.EtcdClient
	}
	return out
}

func (l *Lab) etcdMember(id int) (EtcdMember, error) {
	for _, m := range l.f.EtcdMembers {
		if m.ID == id {
			return m, nil
		}
	}
	if len(l.f.EtcdMembers) == 0 {
		return EtcdMember{}, ErrNoEtcd
	}
	return EtcdMember{}, fmt.Errorf("%w: no etcd member %d (members are 1-%d)", ErrInvalid, id, len(l.f.EtcdMembers))
}

// EtcdLeader returns the number (from 1) of the member that leads now: the
// one a majority of the cluster names, asked directly (not through the
// fronts). The error wraps etcdstatus.ErrNoLeader when there is none.
func (l *Lab) EtcdLeader(ctx context.Context) (int, error) {
	if len(l.f.EtcdMembers) == 0 {
		return 0, ErrNoEtcd
	}
	i, _, err := etcdstatus.Leader(ctx, l.etcdDirectURLs())
	if err != nil {
		return 0, fmt.Errorf("lab: %w", err)
	}
	return l.f.EtcdMembers[i].ID, nil
}

// EtcdStatus returns every member's status. A member whose supervisor does
// not answer is reported NodeDown with what its last status file said.
func (l *Lab) EtcdStatus(ctx context.Context) ([]EtcdMemberStatus, error) {
	out := make([]EtcdMemberStatus, 0, len(l.f.EtcdMembers))
	for _, m := range l.f.EtcdMembers {
		var st EtcdMemberStatus
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := etcdControl(m).Status(sctx, &st)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			st = node.LastEtcdStatus(l.stateDir, m.ID)
			st.ID, st.State, st.SupervisorPID, st.EtcdPID = m.ID, node.Down, 0, 0
		}
		out = append(out, st)
	}
	return out, nil
}

// EtcdKill SIGKILLs member's etcd (TargetLeader: the leader's): a crash.
// Its supervisor starts it again after the restart delay, and the fault
// ends when it answers again. It returns once the process is gone.
func (l *Lab) EtcdKill(ctx context.Context, member int) (EtcdFaultResult, error) {
	return l.etcdFault(ctx, member, fault.Kill, nil)
}

// EtcdPowerLoss crashes member like EtcdKill and cuts its data directory
// back to what etcd had fsynced (the filesystem model) before it restarts.
// It returns once the cut is done.
func (l *Lab) EtcdPowerLoss(ctx context.Context, member int) (EtcdFaultResult, error) {
	if err := l.checkPowerLoss(); err != nil {
		return EtcdFaultResult{}, err
	}
	return l.etcdFault(ctx, member, fault.PowerLoss, nil)
}

// EtcdRestart crashes member like EtcdKill, but it comes back after delay
// instead of the restart delay (0: at once).
func (l *Lab) EtcdRestart(ctx context.Context, member int, delay time.Duration) (EtcdFaultResult, error) {
	return l.EtcdApply(ctx, member, fault.Restart, fault.Params{"delay": {D: delay}})
}

// EtcdStop shuts member's etcd down cleanly (SIGTERM) and keeps it down
// until EtcdStart. It returns once it is down.
func (l *Lab) EtcdStop(ctx context.Context, member int) (EtcdFaultResult, error) {
	return l.etcdFault(ctx, member, fault.Stop, nil)
}

// EtcdStart starts a stopped member and returns once etcd runs; the stop
// fault ends once the member has rejoined its cluster (which needs a
// majority running).
func (l *Lab) EtcdStart(ctx context.Context, member int) (EtcdFaultResult, error) {
	return l.etcdFault(ctx, member, fault.Start, nil)
}

// EtcdPause SIGSTOPs member's etcd for d, after which its supervisor
// continues it. It returns at once.
func (l *Lab) EtcdPause(ctx context.Context, member int, d time.Duration) (EtcdFaultResult, error) {
	return l.EtcdApply(ctx, member, fault.Pause, fault.Params{fault.For: {D: d}})
}

// EtcdPartition silences member's client and peer fronts (see
// package node, etcd.go, for what that cuts, and what it does not).
func (l *Lab) EtcdPartition(ctx context.Context, member int) (EtcdFaultResult, error) {
	return l.etcdFault(ctx, member, fault.Partition, nil)
}

// EtcdLatency delays what member's fronts pass back by add ± jitter; add 0
// removes it.
func (l *Lab) EtcdLatency(ctx context.Context, member int, add, jitter time.Duration) (EtcdFaultResult, error) {
	return l.EtcdApply(ctx, member, fault.Latency, fault.Params{"add": {D: add}, "jitter": {D: jitter}})
}

// EtcdHeal removes every network fault from the members, or from every
// member when none is given.
func (l *Lab) EtcdHeal(ctx context.Context, members ...int) error {
	if len(members) == 0 {
		for _, m := range l.f.EtcdMembers {
			members = append(members, m.ID)
		}
	}
	for _, id := range members {
		if _, err := l.etcdFault(ctx, id, fault.Heal, nil); err != nil {
			return err
		}
	}
	return nil
}

// EtcdApply injects a fault of the catalogue into member (TargetLeader: the
// leader's) as data, like Apply; the Etcd methods above are its kinds with
// typed arguments.
func (l *Lab) EtcdApply(ctx context.Context, member int, kind fault.Kind, params fault.Params) (EtcdFaultResult, error) {
	if kind == fault.PowerLoss {
		if err := l.checkPowerLoss(); err != nil {
			return EtcdFaultResult{}, err
		}
	}
	sent, err := requestOf(kind, params, fault.EtcdMember, false)
	if err != nil {
		return EtcdFaultResult{}, fmt.Errorf("lab: %s etcd member %d: %w", kind, member, err)
	}
	return l.etcdFault(ctx, member, kind, sent)
}

// etcdFault sends a fault request with params (as requestOf returns them)
// to member, naming in it the leader when the lab chose the member as the
// leader.
func (l *Lab) etcdFault(ctx context.Context, member int, kind FaultKind, params fault.Params) (EtcdFaultResult, error) {
	leader := member == TargetLeader
	if leader {
		id, err := l.EtcdLeader(ctx)
		if err != nil {
			return EtcdFaultResult{}, fmt.Errorf("lab: %s the etcd leader: %w", kind, err)
		}
		member = id
	}
	m, err := l.etcdMember(member)
	if err != nil {
		return EtcdFaultResult{}, err
	}
	c := etcdControl(m)
	if leader {
		c.Target = "leader"
	}
	var res EtcdFaultResult
	if err := c.Fault(ctx, kind, params, &res); err != nil {
		return EtcdFaultResult{}, fmt.Errorf("lab: %s etcd member %d: %w", kind, m.ID, err)
	}
	return res, nil
}

// EtcdInjector is member (TargetLeader: the member that leads when a fault
// fires) as a fault target, as Injector is a node: the result's Target is
// the member that took the fault.
func (l *Lab) EtcdInjector(member int) fault.Injector {
	return fault.InjectorFunc(func(ctx context.Context, kind fault.Kind, p fault.Params) (fault.Result, error) {
		res, err := l.EtcdApply(ctx, member, kind, p)
		return res.Result, err
	})
}

// etcdControl is the client of member m's control endpoint.
func etcdControl(m EtcdMember) node.Control {
	return node.Control{Addr: m.Control, What: "etcd member " + strconv.Itoa(m.ID)}
}

// waitEtcdHealthy waits until every member reports itself healthy (a
// leader, a linearizable read), asked directly.
func waitEtcdHealthy(ctx context.Context, members []EtcdMember, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for _, m := range members {
		for {
			hctx, hcancel := context.WithTimeout(ctx, time.Second)
			err := etcdstatus.Healthy(hctx, "http://"+m.EtcdClient)
			hcancel()
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("lab: etcd member %d not healthy: %w (last error: %v)", m.ID, ctx.Err(), err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// EtcdMember is one etcd member as clients and fault injectors see it.
type EtcdMember struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
	// Client and Peer are the fronts: what clients and the other members
	// use.
	Client string `json:"client"`
	Peer   string `json:"peer"`
	// EtcdClient and EtcdPeer are etcd itself, bypassing the fronts.
	EtcdClient string `json:"etcd_client"`
	EtcdPeer   string `json:"etcd_peer"`
	// Control is the supervisor's control endpoint.
	Control string `json:"control"`
}

// FindEtcd returns the etcd binary a lab runs: $REDLAB_ETCD_BIN, else
// bin/etcd next to the redlab binary or in the repository holding infraDir
// (`make etcd` builds it there), else etcd on PATH.
func FindEtcd(redlab, infraDir string) (string, error) {
	if p := os.Getenv("REDLAB_ETCD_BIN"); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("lab: REDLAB_ETCD_BIN=%s: %w", p, err)
		}
		return filepath.Abs(p)
	}
	var cands []string
	if redlab != "" {
		cands = append(cands, filepath.Join(filepath.Dir(redlab), "etcd"))
	}
	if infraDir != "" {
		cands = append(cands, filepath.Join(filepath.Dir(infraDir), "bin", "etcd"))
	}
	for _, c := range cands {
		if executable(c) == nil {
			return c, nil
		}
	}
	p, err := exec.LookPath("etcd")
	if err != nil {
		return "", fmt.Errorf("lab: no etcd binary (tried $REDLAB_ETCD_BIN, %s, PATH): build it with 'make etcd': %w", strings.Join(cands, ", "), err)
	}
	return filepath.Abs(p)
}

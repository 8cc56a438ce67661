package node

import (
	"context"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/fault"
	"maps"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A replicated node (Config.Replicas 1) is a pair of redis-servers under one
// supervisor, the topology Redlock's docs warn against: the "original"
// process (RedisPort, run through the restart guard like any node) and the
// "replica" process (ReplicaPort, restarted at once when it exits: it holds
// nothing a replica can lose). One of them is the pair's master, the other
// follows it asynchronously through the replication link's front
// (ReplicaLinkPort, a proxy the supervisor owns, so that Failover can hold
// replication back). The node's front (Port) leads to the master.
//
// A reconciler keeps the roles: every replicaTick it asks both processes
// for their role and makes the master a master and the other a replica of
// the link front (masteruser/masterauth set at runtime to the lab's admin,
// so no password is written into replica.conf). So a process that comes
// back after a crash rejoins as a replica, as Sentinel would make it, and
// Failover only has to swap which one is the master.
const replicaTick = 200 * time.Millisecond

// pairSide is one of a replicated node's two processes.
type pairSide int

const (
	sideOriginal pairSide = iota
	sideReplica
)

func (p pairSide) String() string {
	if p == sideReplica {
		return "replica process"
	}
	return "original process"
}

// replicaSet is what the supervisor runs for a node's replica.
type replicaSet struct {
	conf   redisConf
	link   *proxy        // the replication link's front
	direct *redis.Client // the replica process's own port, as admin

	// proc is guarded by the supervisor's mu.
	proc *child
}

// startReplica sets up the replica side of a replicated node: its link
// front, pointed at the pair's master.
func (s *supervisor) startReplica(auth User) error {
	spec := s.spec
	rs := &replicaSet{conf: parseRedisConf(spec.ReplicaConf)}
	rs.direct = redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:" + strconv.Itoa(spec.ReplicaPort), MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		PoolSize: 2, Username: auth.Name, Password: auth.Password,
	})
	link, err := startProxy(fmt.Sprintf("node%d-replication", spec.ID), "127.0.0.1:"+strconv.Itoa(spec.ReplicaLinkPort), s.masterAddr())
	if err != nil {
		rs.direct.Close()
		return err
	}
	rs.link = link
	s.rep = rs
	return nil
}

// masterAddr is the redis-server the pair's master runs on: where the
// node's front and the replication link lead.
func (s *supervisor) masterAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sideAddr(s.masterSideLocked())
}

func (s *supervisor) sideAddr(p pairSide) string {
	if p == sideReplica {
		return "127.0.0.1:" + strconv.Itoa(s.spec.ReplicaPort)
	}
	return "127.0.0.1:" + strconv.Itoa(s.spec.RedisPort)
}

func (s *supervisor) masterSideLocked() pairSide {
	if s.st.Replica != nil && s.st.Replica.Promoted {
		return sideReplica
	}
	return sideOriginal
}

// sideClient is the admin client of one process of the pair.
func (s *supervisor) sideClient(p pairSide) *redis.Client {
	if p == sideReplica {
		return s.rep.direct
	}
	return s.direct
}

// sideProcLocked is one side's running process, if any.
func (s *supervisor) sideProcLocked(p pairSide) *child {
	if p == sideReplica {
		return s.rep.proc
	}
	return s.proc
}

// stopReplica closes what startReplica opened (the process is stopped by
// its own loop).
func (s *supervisor) stopReplica() {
	if s.rep == nil {
		return
	}
	s.rep.link.Stop()
	s.rep.direct.Close()
}

// superviseReplica runs the replica process until ctx ends: adopt one left
// by a previous supervisor or start one, wait until it answers, and when it
// exits start it again at once. Then it stops it cleanly.
func (s *supervisor) superviseReplica(ctx context.Context) {
	pids := FindRedis(s.rep.conf.dir)
	for i, pid := range pids {
		if i > 0 {
			s.log.Printf("replica: killing extra redis-server pid %d", pid)
			signalGroup(pid, syscall.SIGKILL)
			continue
		}
		s.log.Printf("replica: adopting redis-server pid %d left by a previous supervisor", pid)
		signalGroup(pid, syscall.SIGCONT)
		p := adoptChild(pid, &s.wg)
		s.setReplicaProc(p)
	}
	for {
		s.mu.Lock()
		p := s.rep.proc
		s.mu.Unlock()
		if p == nil {
			var err error
			if p, err = s.startReplicaProc(); err != nil {
				s.log.Printf("replica: start: %v", err)
				select {
				case <-time.After(time.Second):
					continue
				case <-ctx.Done():
					return
				}
			}
		}
		s.awaitReplicaReady(ctx, p)
		select {
		case <-p.done:
		case <-ctx.Done():
			p.stop(stopTimeout)
			s.replicaExited(p, false)
			return
		}
		s.replicaExited(p, true)
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
}

func (s *supervisor) startReplicaProc() (*child, error) {
	p, err := s.startRedis(replicaConfFile)
	if err != nil {
		return nil, err
	}
	s.log.Printf("replica: redis-server started, pid %d", p.pid)
	s.setReplicaProc(p)
	return p, nil
}

func (s *supervisor) setReplicaProc(p *child) {
	_ = writePID(s.spec.path(replicaPIDFile), p.pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rep.proc = p
	s.st.Replica.PID = p.pid
	s.st.Replica.State = Starting
	s.st.Replica.Synced = false
	s.saveLocked()
}

// awaitReplicaReady waits until p answers PING, exits, or ctx ends.
func (s *supervisor) awaitReplicaReady(ctx context.Context, p *child) {
	if _, ok := awaitAnswer(ctx, p, func(ctx context.Context) error { return s.rep.direct.Ping(ctx).Err() }); !ok {
		return
	}
	s.mu.Lock()
	if s.rep.proc == p {
		s.st.Replica.State = Up
		s.saveLocked()
	}
	s.mu.Unlock()
}

func (s *supervisor) replicaExited(p *child, crash bool) {
	os.Remove(s.spec.path(replicaPIDFile))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rep.proc != p {
		return
	}
	s.rep.proc = nil
	s.st.Replica.PID = 0
	s.st.Replica.State = Down
	s.st.Replica.Synced = false
	if crash {
		s.st.Replica.Restarts++
		s.log.Printf("replica: redis-server pid %d ended: %s; starting it again", p.pid, p.exit)
	}
	s.saveLocked()
}

// reconcileRoles keeps the pair's roles until ctx ends (see replicaTick).
func (s *supervisor) reconcileRoles(ctx context.Context) {
	t := time.NewTicker(replicaTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.reconcileOnce(ctx)
	}
}

func (s *supervisor) reconcileOnce(ctx context.Context) {
	s.mu.Lock()
	if s.failingOver {
		s.mu.Unlock()
		return
	}
	master := s.masterSideLocked()
	follower := sideOriginal
	if master == sideOriginal {
		follower = sideReplica
	}
	running := map[pairSide]bool{}
	for _, p := range []pairSide{sideOriginal, sideReplica} {
		running[p] = s.sideProcLocked(p) != nil
	}
	// The original process counts only once its supervisor saw it answer.
	running[sideOriginal] = running[sideOriginal] && (s.st.State == Up || s.st.State == Paused)
	running[sideReplica] = running[sideReplica] && s.st.Replica.State == Up
	s.mu.Unlock()

	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if running[master] {
		if role, _, err := s.replicationInfo(cctx, master); err == nil && role != "master" {
			s.log.Printf("reconcile: the %s is the master but reports %s; REPLICAOF NO ONE", master, role)
			if err := s.sideClient(master).Do(cctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
				s.log.Printf("reconcile: %v", err)
			}
		}
	}
	synced := false
	if running[follower] {
		role, info, err := s.replicationInfo(cctx, follower)
		switch {
		case err != nil:
		case role == "master" || infoValue(info, "master_port") != strconv.Itoa(s.spec.ReplicaLinkPort):
			s.log.Printf("reconcile: the %s follows the master through 127.0.0.1:%d", follower, s.spec.ReplicaLinkPort)
			if err := s.follow(cctx, follower); err != nil {
				s.log.Printf("reconcile: %v", err)
			}
		default:
			synced = infoValue(info, "master_link_status") == "up"
		}
	}
	s.mu.Lock()
	if s.st.Replica.Synced != synced && !s.failingOver {
		s.st.Replica.Synced = synced
		s.saveLocked()
	}
	s.mu.Unlock()
}

// follow makes one process of the pair a replica of the master, through
// the replication link's front.
func (s *supervisor) follow(ctx context.Context, p pairSide) error {
	c := s.sideClient(p)
	if s.auth.Name != "" {
		if err := c.ConfigSet(ctx, "masteruser", s.auth.Name).Err(); err != nil {
			return fmt.Errorf("%s: CONFIG SET masteruser: %w", p, err)
		}
		if err := c.ConfigSet(ctx, "masterauth", s.auth.Password).Err(); err != nil {
			return fmt.Errorf("%s: CONFIG SET masterauth: %w", p, err)
		}
	}
	if err := c.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(s.spec.ReplicaLinkPort)).Err(); err != nil {
		return fmt.Errorf("%s: REPLICAOF: %w", p, err)
	}
	return nil
}

// replicationInfo is one process's INFO replication and its role.
func (s *supervisor) replicationInfo(ctx context.Context, p pairSide) (role, info string, err error) {
	info, err = s.sideClient(p).Info(ctx, "replication").Result()
	if err != nil {
		return "", "", err
	}
	return infoValue(info, "role"), info, nil
}

// infoValue returns the value of "key:value" in an INFO reply.
func infoValue(info, key string) string {
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":"); ok && k == key {
			return v
		}
	}
	return ""
}

// failover crashes the pair's master (SIGKILL), promotes the other process
// (REPLICAOF NO ONE) and points the node's front and the replication link
// at it, as Sentinel or a managed endpoint would: clients keep the node's
// address. With lag > 0 replication is cut at the link front for lag
// before the crash (after waiting, up to a second, for the replica to have
// everything), so what was written during the lag is certainly lost. The
// crashed process restarts through the restart guard and rejoins as a
// replica. The fault ends when the promoted process answers as master
// through the node's front.
func (s *supervisor) failover(ctx context.Context, p fault.Params) (fault.Result, error) {
	lag := p.D("lag")
	// A node without a replica (s.rep nil) was refused by checkFault.
	s.mu.Lock()
	if s.failingOver {
		s.mu.Unlock()
		return fault.Result{}, fmt.Errorf("%w: a failover of node %d is already under way", ErrInvalid, s.spec.ID)
	}
	master := s.masterSideLocked()
	standby := sideReplica
	if master == sideReplica {
		standby = sideOriginal
	}
	mp, sp := s.sideProcLocked(master), s.sideProcLocked(standby)
	standbyUp := sp != nil && (standby == sideReplica && s.st.Replica.State == Up ||
		standby == sideOriginal && (s.st.State == Up || s.st.State == Paused))
	if !standbyUp {
		err := fmt.Errorf("%w: node %d's %s, the one to promote, is not running", ErrNotRunning, s.spec.ID, standby)
		s.mu.Unlock()
		return fault.Result{}, err
	}
	s.failingOver = true
	params := notes(ctx)
	params["lag"], params["from"] = lag.String(), s.sideAddr(master)
	f := s.faults.startLocked(fault.Failover, params)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.failingOver = false
		s.st.Replica.LinkCut = false
		s.saveLocked()
		s.mu.Unlock()
	}()

	res := fault.FailoverResult{Lag: lag, LostBytes: -1, Promoted: s.sideAddr(standby)}
	fail := func(err error) (fault.Result, error) {
		s.rep.link.heal()
		s.mu.Lock()
		s.faults.endLocked(fault.Failover, map[string]string{"error": err.Error()})
		s.mu.Unlock()
		return fault.Result{}, fmt.Errorf("node %d: failover: %w", s.spec.ID, err)
	}
	if lag > 0 {
		res.CaughtUp = s.awaitCaughtUp(ctx, master, standby, time.Second)
		if err := s.rep.link.partition(); err != nil {
			return fail(err)
		}
		s.mu.Lock()
		s.st.Replica.LinkCut = true
		s.saveLocked()
		s.mu.Unlock()
		s.log.Printf("failover: replication held back for %v (caught up before: %v)", lag, res.CaughtUp)
		select {
		case <-time.After(lag):
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}

	// What the standby lacks is what the crash loses.
	octx, ocancel := context.WithTimeout(ctx, time.Second)
	if mOff, sOff, ok := s.offsets(octx, master, standby); ok {
		res.LostBytes = max(mOff-sOff, 0)
	}
	ocancel()

	if mp != nil {
		signalGroup(mp.pid, syscall.SIGKILL)
		select {
		case <-mp.done:
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	s.log.Printf("failover: %s (pid %d) crashed; promoting the %s", master, pidOf(mp), standby)
	if err := s.sideClient(standby).Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		return fail(fmt.Errorf("REPLICAOF NO ONE on the %s: %w", standby, err))
	}
	to := s.sideAddr(standby)
	if err := s.proxy.retarget(to); err != nil {
		return fail(err)
	}
	s.rep.link.heal()
	if err := s.rep.link.retarget(to); err != nil {
		return fail(err)
	}
	s.mu.Lock()
	s.st.Replica.Promoted = standby == sideReplica
	s.st.Replica.Synced = false
	s.saveLocked()
	s.mu.Unlock()

	if err := s.awaitFrontMaster(ctx); err != nil {
		return fail(err)
	}
	end := map[string]string{
		"promoted": res.Promoted, "caught_up": strconv.FormatBool(res.CaughtUp), "lost_bytes": strconv.FormatInt(res.LostBytes, 10),
	}
	s.mu.Lock()
	s.faults.endLocked(fault.Failover, end)
	s.mu.Unlock()
	s.log.Printf("failover: the %s answers as master through 127.0.0.1:%d (lost %d bytes of replication)", standby, s.spec.Port, res.LostBytes)
	f.End = time.Now()
	maps.Copy(f.Params, end)
	r := recorded(&f)
	r.Failover = &res
	return r, nil
}

func pidOf(p *child) int {
	if p == nil {
		return 0
	}
	return p.pid
}

// awaitCaughtUp waits up to limit until the standby's replication offset
// reaches the master's, as the master reported it when the wait began.
func (s *supervisor) awaitCaughtUp(ctx context.Context, master, standby pairSide, limit time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	_, info, err := s.replicationInfo(ctx, master)
	if err != nil {
		return false
	}
	want, err := strconv.ParseInt(infoValue(info, "master_repl_offset"), 10, 64)
	if err != nil {
		return false
	}
	for {
		if _, info, err := s.replicationInfo(ctx, standby); err == nil {
			got, err := strconv.ParseInt(infoValue(info, "slave_repl_offset"), 10, 64)
			if err == nil && got >= want && infoValue(info, "master_link_status") == "up" {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// offsets reads the master's replication offset and how far the standby
// got.
func (s *supervisor) offsets(ctx context.Context, master, standby pairSide) (mOff, sOff int64, ok bool) {
	_, mi, err1 := s.replicationInfo(ctx, master)
	_, si, err2 := s.replicationInfo(ctx, standby)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	mOff, err1 = strconv.ParseInt(infoValue(mi, "master_repl_offset"), 10, 64)
	sOff, err2 = strconv.ParseInt(infoValue(si, "slave_repl_offset"), 10, 64)
	return mOff, sOff, err1 == nil && err2 == nil
}

// awaitFrontMaster waits until the node's front answers, as the lab's
// admin, with role master.
func (s *supervisor) awaitFrontMaster(ctx context.Context) error {
	c := redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:" + strconv.Itoa(s.spec.Port), MaxRetries: -1, PoolSize: 1,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
		Username: s.auth.Name, Password: s.auth.Password,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && infoValue(info, "role") == "master" {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("role %s", infoValue(info, "role"))
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("the node's front does not answer as master: %w", last)
		case <-time.After(pollInterval):
		}
	}
}

package lab

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// testGuard behaves like the rendered restart guard, reduced to its rule:
// pre-start waits REDIS_GUARD_DELAY (default 1s) unless the last stop was
// clean, then records running; post-stop records clean only after running.
const testGuard = `#!/bin/bash
set -eu
state="$(dirname "$0")/guard-state"
last="$(cat "$state" 2>/dev/null || echo none)"
case "$1" in
pre-start)
	if [ "$last" != clean ]; then sleep "${REDIS_GUARD_DELAY:-1}"; fi
	echo running >"$state" ;;
post-stop)
	if [ "$2" = unclean ] || [ "$last" = running ]; then echo "$2" >"$state"; fi ;;
esac
`

const testGuardDelay = time.Second

// syncBuffer is a bytes.Buffer safe for the supervisor's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// prepareTestNode writes node 1 of a lab in a temporary state directory,
// with AOF and appendfsync always.
func prepareTestNode(t *testing.T) NodeSpec {
	t.Helper()
	return prepareTestNodeConf(t, "appendonly yes\nappendfsync always\n")
}

func prepareTestNodeConf(t *testing.T, persistence string) NodeSpec {
	t.Helper()
	return prepareTestNodeIn(t, t.TempDir(), persistence)
}

// prepareTestNodeIn writes node 1 of a lab in state directory dir, with
// extra (persistence settings, ACL users) in its redis.conf.
func prepareTestNodeIn(t *testing.T, dir, extra string) NodeSpec {
	t.Helper()
	bin := testenv.Require(t, "redis-server")
	spec := NodeSpec{
		ID: 1, StateDir: dir,
		Port: redistest.FreePort(t), RedisPort: redistest.FreePort(t), ControlPort: redistest.FreePort(t),
		RestartDelay: Duration(testGuardDelay), RedisServer: bin, Guard: []byte(testGuard),
	}
	nd := nodeDir(dir, 1)
	spec.Conf = fmt.Appendf(nil, "bind 127.0.0.1\nport %d\ndaemonize no\ndir %s/data\nlogfile %q\n%ssave \"\"\nmaxmemory-policy noeviction\n",
		spec.RedisPort, nd, nd+"/redis.log", extra)
	if err := PrepareNode(spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

// runTestSupervisor runs RunNode in this process and returns a Lab for it;
// the supervisor is stopped, and checked to leave nothing, at cleanup.
func runTestSupervisor(t *testing.T, spec NodeSpec) *Lab {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- RunNode(ctx, spec.StateDir, spec.ID, logs) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunNode: %v", err)
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("supervisor log:\n%s", logs.String())
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if err := waitNodeUp(wctx, spec, os.Getpid()); err != nil {
		t.Fatalf("%v\nlog:\n%s", err, logs.String())
	}
	return &Lab{stateDir: spec.StateDir, f: labFile{
		Count: 1, RestartDelay: spec.RestartDelay, Persistence: PersistAlways,
		Nodes: []Node{{
			ID: 1, Addr: fmt.Sprintf("127.0.0.1:%d", spec.Port),
			RedisAddr: fmt.Sprintf("127.0.0.1:%d", spec.RedisPort),
			Control:   fmt.Sprintf("127.0.0.1:%d", spec.ControlPort),
		}},
	}}
}

// TestSupervisorFaults runs the supervisor in-process (under the race
// detector) and every fault against it.
func TestSupervisorFaults(t *testing.T) {
	spec := prepareTestNode(t)
	l := runTestSupervisor(t, spec)
	if st := status(t, l, 1); st.State != NodeUp || st.Persistence != PersistAlways || st.Restarts != 0 {
		t.Fatalf("fresh node: status %+v, want up, always, 0 restarts", st)
	}
	if fileExists(spec.path(freshMarker)) {
		t.Error("fresh marker still there once the node is up")
	}
	checkPartition(t, l, 1)
	checkLatency(t, l, 1, 100*time.Millisecond)
	checkPause(t, l, 1, 500*time.Millisecond)
	checkClockJump(t, l, 1)
	checkKill(t, l, 1, testGuardDelay, true)
	checkRestartOverride(t, l, 1)
	checkStopStart(t, l, 1, true)
	checkClockRate(t, l, 1)

	// Faults on a node that cannot take them say so.
	if _, err := l.Stop(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Kill(context.Background(), 1); !errors.Is(err, ErrNotRunning) {
		t.Errorf("kill of a stopped node: got %v, want ErrNotRunning", err)
	}
	if _, err := l.Pause(context.Background(), 1, time.Second); !errors.Is(err, ErrNotRunning) {
		t.Errorf("pause of a stopped node: got %v, want ErrNotRunning", err)
	}
	if _, err := l.Latency(context.Background(), 1, -time.Second, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative latency: got %v, want ErrInvalid", err)
	}
	if _, err := l.Start(context.Background(), 1); err != nil {
		t.Fatal(err)
	}

	faults, err := l.Faults()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[FaultKind]bool{}
	for _, f := range faults {
		seen[f.Kind] = true
		if f.Active() {
			t.Errorf("fault %s still active after its check", f.ID)
		} else if f.End.Before(f.Start) {
			t.Errorf("fault %s ends %v before it starts %v", f.ID, f.End, f.Start)
		}
	}
	for _, k := range []FaultKind{FaultPartition, FaultLatency, FaultPause, FaultClockJump, FaultKill, FaultRestart, FaultStop, FaultClockRate} {
		if !seen[k] {
			t.Errorf("no %s in faults.jsonl", k)
		}
	}
}

// TestSupervisorNoneLosesKeys: without AOF or RDB a killed node comes back
// empty, which is what the "none" profile models.
func TestSupervisorNoneLosesKeys(t *testing.T) {
	spec := prepareTestNodeConf(t, "appendonly no\n")
	l := runTestSupervisor(t, spec)
	if st := status(t, l, 1); st.Persistence != PersistNone {
		t.Fatalf("persistence: got %s, want none", st.Persistence)
	}
	checkKill(t, l, 1, testGuardDelay, false)
}

// TestSupervisorReplacesOrphan starts redis-server the way a supervisor
// that then crashed would have. The data directory is the power-loss
// filesystem, which the crashed supervisor served: the orphan's disk died
// with it, so the next supervisor ends the orphan (a crash, which the
// restart guard hears as such) and starts its own redis-server on a fresh
// mount, rather than adopting a server whose writes would bypass it.
func TestSupervisorReplacesOrphan(t *testing.T) {
	if err := CheckPowerLoss(); err != nil {
		testenv.Missing(t, err.Error())
	}
	spec := prepareTestNode(t)
	conf := parseRedisConf(spec.Conf)
	// The crashed supervisor had run pre-start.
	if err := os.WriteFile(filepath.Join(spec.dir(), "guard-state"), []byte("running\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	orphan, exited := startOrphan(t, spec)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &syncBuffer{}
	go func() { done <- RunNode(ctx, spec.StateDir, spec.ID, logs) }()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if err := waitNodeUp(wctx, spec, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the orphaned redis-server still runs beside the new supervisor")
	}
	var st NodeStatus
	eventually(t, 20*time.Second, "node up", func() error {
		if err := readJSONFile(spec.path(statusFile), &st); err != nil {
			return err
		}
		if st.State != NodeUp {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
	if st.RedisPID == orphan.Process.Pid {
		t.Errorf("supervisor runs the orphan %d, want a redis-server of its own", st.RedisPID)
	}
	if got := findRedis(conf.dir); len(got) != 1 || got[0] != st.RedisPID {
		t.Errorf("redis-server processes in the data dir: %v, want exactly the supervisor's %d", got, st.RedisPID)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if fileExists(spec.path(supervisorPIDFile)) || fileExists(spec.path(redisPIDFile)) {
		t.Error("pid files left behind")
	}
	if b, _ := os.ReadFile(filepath.Join(spec.dir(), "guard-state")); string(bytes.TrimSpace(b)) != "clean" {
		t.Errorf("guard state after the stop: %q, want clean", b)
	}
}

func TestStopNodeSweepsOrphans(t *testing.T) {
	spec := prepareTestNode(t)
	_, exited := startOrphan(t, spec)
	if err := StopNode(context.Background(), spec.StateDir, spec.ID, true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("StopNode left the orphaned redis-server running")
	}
	if fileExists(spec.dir()) {
		t.Errorf("%s still exists after a purge", spec.dir())
	}
	if err := StopNode(context.Background(), spec.StateDir, spec.ID, true); err != nil {
		t.Errorf("stopping a node that is gone: %v, want nil", err)
	}
}

// startOrphan starts spec's redis-server the way a supervisor does, but
// with no supervisor, and waits until it answers. It is killed when the
// test ends; exited is closed once it has exited.
func startOrphan(t *testing.T, spec NodeSpec) (orphan *exec.Cmd, exited <-chan struct{}) {
	t.Helper()
	orphan = exec.Command(spec.RedisServer, spec.path(confFile))
	orphan.Dir = parseRedisConf(spec.Conf).dir
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { orphan.Wait(); close(done) }()
	t.Cleanup(func() { orphan.Process.Kill(); <-done })
	eventually(t, 10*time.Second, "orphan answers", func() error {
		return pingAddr(fmt.Sprintf("127.0.0.1:%d", spec.RedisPort), User{}, 200*time.Millisecond)
	})
	return orphan, done
}

// TestSupervisorPowerLoss cuts the power of a node per profile, on the
// filesystem model: always loses nothing, everysec what it had not fsynced
// yet, no-fsync and none everything; a kill of an everysec node keeps
// everything (the page cache survives it).
func TestSupervisorPowerLoss(t *testing.T) {
	tests := []struct {
		prof Persistence
		conf string
	}{
		{PersistEverysec, "appendonly yes\nappendfsync everysec\n"},
		{PersistAlways, "appendonly yes\nappendfsync always\n"},
		{PersistNone, "appendonly no\n"},
		{PersistNoFsync, "appendonly yes\nappendfsync no\n"},
	}
	for _, tt := range tests {
		t.Run(string(tt.prof), func(t *testing.T) {
			l := runTestSupervisor(t, prepareTestNodeConf(t, tt.conf))
			if st := status(t, l, 1); st.Persistence != tt.prof || st.AOF != nil {
				t.Fatalf("status %+v: want %s, and no AOF sample (a process node's power loss is the filesystem's)", st, tt.prof)
			}
			checkPowerLoss(t, l, 1, tt.prof)
			if tt.prof == PersistEverysec {
				checkKill(t, l, 1, testGuardDelay, true)
				checkPowerLoss(t, l, 1, tt.prof) // the history restarted after the cut
			}
		})
	}
}

func TestSupervisorPowerLossNotRunning(t *testing.T) {
	l := runTestSupervisor(t, prepareTestNodeConf(t, "appendonly yes\nappendfsync everysec\n"))
	ctx := context.Background()
	if _, err := l.Stop(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.PowerLoss(ctx, 1); !errors.Is(err, ErrNotRunning) {
		t.Errorf("power loss of a stopped node: got %v, want ErrNotRunning", err)
	}
}

// TestSupervisorPowerLossCustomProfile: on the filesystem model a power
// loss needs no profile to guess from; a node with RDB snapshots only is
// cut as any other, and its fault says which model ran.
func TestSupervisorPowerLossCustomProfile(t *testing.T) {
	l := runTestSupervisor(t, prepareTestNodeConf(t, "appendonly no\nsave 60 1\n"))
	ctx := context.Background()
	res, err := l.PowerLoss(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if pl := res.PowerLoss; pl == nil || pl.Model != PowerLossFilesystem {
		t.Errorf("power loss of an RDB-only node: got %+v, want the filesystem model", pl)
	}
	eventually(t, 20*time.Second, "node back after the power loss", func() error { return ping(t, l, 1, 300*time.Millisecond) })
}

// aclConf is what envs/local renders for ACLs, reduced to the users the
// supervisor and these tests use.
func aclConf(c Credentials) string {
	hash := func(p string) string { return fmt.Sprintf("%x", sha256.Sum256([]byte(p))) }
	return "appendonly yes\nappendfsync everysec\n" +
		"user default off resetpass resetkeys resetchannels -@all\n" +
		"user admin on #" + hash(c.Admin.Password) + " resetkeys ~* resetchannels &* +@all\n"
}

// TestSupervisorACL runs a node whose redis.conf turns ACLs on: the
// supervisor logs in as the lab's admin for its readiness PING, the
// clock-jump model and a power loss's restart.
func TestSupervisorACL(t *testing.T) {
	dir := t.TempDir()
	creds, err := ensureCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	l := runTestSupervisor(t, prepareTestNodeIn(t, dir, aclConf(creds)))
	if err := pingAddr(l.Nodes()[0].Addr, User{}, time.Second); !redis.IsAuthError(err) {
		t.Fatalf("PING without a login: got %v, want an auth error (ACLs are on)", err)
	}
	checkClockJump(t, l, 1)
	checkKill(t, l, 1, testGuardDelay, true)
	checkPowerLoss(t, l, 1, PersistEverysec)
}

// prepareReplicatedTestNode writes node 1 with an asynchronous replica,
// ACLs on as in the lab.
func prepareReplicatedTestNode(t *testing.T) NodeSpec {
	t.Helper()
	dir := t.TempDir()
	creds, err := ensureCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	spec := prepareTestNodeIn(t, dir, aclConf(creds))
	spec.ReplicaPort, spec.ReplicaLinkPort = redistest.FreePort(t), redistest.FreePort(t)
	nd := nodeDir(dir, 1)
	spec.ReplicaConf = fmt.Appendf(append([]byte{}, spec.Conf...), "port %d\ndir %s/replica/data\nlogfile %q\n",
		spec.ReplicaPort, nd, nd+"/replica/redis.log")
	if err := PrepareNode(spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestSupervisorFailover runs a replicated node in-process (under the race
// detector): the replica follows through its link front, a failover
// promotes it behind the node's address, and a failover with lag loses what
// was written during the lag.
func TestSupervisorFailover(t *testing.T) {
	spec := prepareReplicatedTestNode(t)
	l := runTestSupervisor(t, spec)
	st := status(t, l, 1)
	if st.Replica == nil || st.Replica.State != NodeUp || !st.Replica.Synced || st.Replica.Addr != fmt.Sprintf("127.0.0.1:%d", spec.ReplicaPort) {
		t.Fatalf("replicated node: replica %+v, want up and synced on port %d", st.Replica, spec.ReplicaPort)
	}
	checkFailover(t, l, 1, 2*time.Second)

	// A node without a replica refuses a failover, saying why.
	plain := runTestSupervisor(t, prepareTestNode(t))
	if _, err := plain.Failover(context.Background(), 1, 0); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "no replica") {
		t.Errorf("failover of a node without a replica: got %v, want ErrInvalid saying it has no replica", err)
	}
	if _, err := l.Failover(context.Background(), 1, -time.Second); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative lag: got %v, want ErrInvalid", err)
	}
}

// TestSupervisorACLNeedsCredentials: a node with ACL users and no
// credentials file cannot be supervised, and says why.
func TestSupervisorACLNeedsCredentials(t *testing.T) {
	dir := t.TempDir()
	creds, err := newCredentials()
	if err != nil {
		t.Fatal(err)
	}
	spec := prepareTestNodeIn(t, dir, aclConf(creds))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = RunNode(ctx, spec.StateDir, spec.ID, nil)
	if !errors.Is(err, ErrNoCredentials) {
		t.Errorf("RunNode without credentials: got %v, want ErrNoCredentials", err)
	}
}

package node_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/faultcheck"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// prepareTestNode writes node 1 of a lab in a temporary state directory,
// with AOF and appendfsync always.
func prepareTestNode(t *testing.T) node.Spec {
	t.Helper()
	return prepareTestNodeConf(t, "appendonly yes\nappendfsync always\n")
}

func prepareTestNodeConf(t *testing.T, persistence string) node.Spec {
	t.Helper()
	return prepareTestNodeIn(t, t.TempDir(), persistence)
}

// prepareTestNodeIn writes node 1 of a lab in state directory dir, with
// extra (persistence settings, ACL users) in its redis.conf.
func prepareTestNodeIn(t *testing.T, dir, extra string) node.Spec {
	t.Helper()
	return faultcheck.PrepareNode(t, dir, extra)
}

// TestSupervisorFaults runs the supervisor in-process (under the race
// detector) and every fault against it.
func TestSupervisorFaults(t *testing.T) {
	spec := prepareTestNode(t)
	l := runTestSupervisor(t, spec)
	if st := faultcheck.Status(t, l, 1); st.State != node.Up || st.Persistence != node.PersistAlways || st.Restarts != 0 {
		t.Fatalf("fresh node: status %+v, want up, always, 0 restarts", st)
	}
	if node.FileExists(spec.Path(node.FreshMarker)) {
		t.Error("fresh marker still there once the node is up")
	}
	faultcheck.Partition(t, l, 1)
	faultcheck.Latency(t, l, 1, 100*time.Millisecond)
	faultcheck.Pause(t, l, 1, 500*time.Millisecond)
	faultcheck.ClockJump(t, l, 1)
	faultcheck.Kill(t, l, 1, faultcheck.GuardDelay, true)
	faultcheck.RestartOverride(t, l, 1)
	faultcheck.StopStart(t, l, 1, true)
	faultcheck.ClockRate(t, l, 1)

	// Faults on a node that cannot take them say so.
	if _, err := l.Stop(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Kill(context.Background(), 1); !errors.Is(err, node.ErrNotRunning) {
		t.Errorf("kill of a stopped node: got %v, want node.ErrNotRunning", err)
	}
	if _, err := l.Pause(context.Background(), 1, time.Second); !errors.Is(err, node.ErrNotRunning) {
		t.Errorf("pause of a stopped node: got %v, want node.ErrNotRunning", err)
	}
	if _, err := l.Latency(context.Background(), 1, -time.Second, 0); !errors.Is(err, node.ErrInvalid) {
		t.Errorf("negative latency: got %v, want node.ErrInvalid", err)
	}
	if _, err := l.Start(context.Background(), 1); err != nil {
		t.Fatal(err)
	}

	faults, err := l.Faults()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[node.FaultKind]bool{}
	for _, f := range faults {
		seen[f.Kind] = true
		if f.Active() {
			t.Errorf("fault %s still active after its check", f.ID)
		} else if f.End.Before(f.Start) {
			t.Errorf("fault %s ends %v before it starts %v", f.ID, f.End, f.Start)
		}
	}
	for _, k := range []node.FaultKind{fault.Partition, fault.Latency, fault.Pause, fault.ClockJump, fault.Kill, fault.Restart, fault.Stop, fault.ClockRate} {
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
	if st := faultcheck.Status(t, l, 1); st.Persistence != node.PersistNone {
		t.Fatalf("persistence: got %s, want none", st.Persistence)
	}
	faultcheck.Kill(t, l, 1, faultcheck.GuardDelay, false)
}

// TestSupervisorReplacesOrphan starts redis-server the way a supervisor
// that then crashed would have. The data directory is the power-loss
// filesystem, which the crashed supervisor served: the orphan's disk died
// with it, so the next supervisor ends the orphan (a crash, which the
// restart guard hears as such) and starts its own redis-server on a fresh
// mount, rather than adopting a server whose writes would bypass it.
func TestSupervisorReplacesOrphan(t *testing.T) {
	if err := node.CheckPowerLoss(); err != nil {
		testenv.Missing(t, err.Error())
	}
	spec := prepareTestNode(t)
	dataDir := node.DataDir(spec.Conf)
	// The crashed supervisor had run pre-start.
	if err := os.WriteFile(filepath.Join(node.Dir(spec.StateDir, spec.ID), "guard-state"), []byte("running\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	orphan, exited := startOrphan(t, spec)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &faultcheck.SyncBuffer{}
	go func() { done <- node.Run(ctx, spec.StateDir, spec.ID, logs) }()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if err := node.WaitUp(wctx, spec, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the orphaned redis-server still runs beside the new supervisor")
	}
	var st node.Status
	faultcheck.Eventually(t, 20*time.Second, "node up", func() error {
		if err := node.ReadJSONFile(spec.Path(node.StatusFile), &st); err != nil {
			return err
		}
		if st.State != node.Up {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
	if st.RedisPID == orphan.Process.Pid {
		t.Errorf("supervisor runs the orphan %d, want a redis-server of its own", st.RedisPID)
	}
	if got := node.FindRedis(dataDir); len(got) != 1 || got[0] != st.RedisPID {
		t.Errorf("redis-server processes in the data dir: %v, want exactly the supervisor's %d", got, st.RedisPID)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if node.FileExists(spec.Path(node.SupervisorPIDFile)) || node.FileExists(spec.Path(node.RedisPIDFile)) {
		t.Error("pid files left behind")
	}
	if b, _ := os.ReadFile(filepath.Join(node.Dir(spec.StateDir, spec.ID), "guard-state")); string(bytes.TrimSpace(b)) != "clean" {
		t.Errorf("guard state after the stop: %q, want clean", b)
	}
}

func TestStopNodeSweepsOrphans(t *testing.T) {
	spec := prepareTestNode(t)
	_, exited := startOrphan(t, spec)
	if err := node.Stop(context.Background(), spec.StateDir, spec.ID, true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop left the orphaned redis-server running")
	}
	if node.FileExists(node.Dir(spec.StateDir, spec.ID)) {
		t.Errorf("%s still exists after a purge", node.Dir(spec.StateDir, spec.ID))
	}
	if err := node.Stop(context.Background(), spec.StateDir, spec.ID, true); err != nil {
		t.Errorf("stopping a node that is gone: %v, want nil", err)
	}
}

// startOrphan starts spec's redis-server the way a supervisor does, but
// with no supervisor, and waits until it answers. It is killed when the
// test ends; exited is closed once it has exited.
func startOrphan(t *testing.T, spec node.Spec) (orphan *exec.Cmd, exited <-chan struct{}) {
	t.Helper()
	orphan = exec.Command(spec.RedisServer, spec.Path(node.ConfFile))
	orphan.Dir = node.DataDir(spec.Conf)
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { orphan.Wait(); close(done) }()
	t.Cleanup(func() { orphan.Process.Kill(); <-done })
	faultcheck.Eventually(t, 10*time.Second, "orphan answers", func() error {
		return faultcheck.PingAddr(fmt.Sprintf("127.0.0.1:%d", spec.RedisPort), node.User{}, 200*time.Millisecond)
	})
	return orphan, done
}

// TestSupervisorPowerLoss cuts the power of a node per profile, on the
// filesystem model: always loses nothing, everysec what it had not fsynced
// yet, no-fsync and none everything; a kill of an everysec node keeps
// everything (the page cache survives it).
func TestSupervisorPowerLoss(t *testing.T) {
	tests := []struct {
		prof node.Persistence
		conf string
	}{
		{node.PersistEverysec, "appendonly yes\nappendfsync everysec\n"},
		{node.PersistAlways, "appendonly yes\nappendfsync always\n"},
		{node.PersistNone, "appendonly no\n"},
		{node.PersistNoFsync, "appendonly yes\nappendfsync no\n"},
	}
	for _, tt := range tests {
		t.Run(string(tt.prof), func(t *testing.T) {
			l := runTestSupervisor(t, prepareTestNodeConf(t, tt.conf))
			if st := faultcheck.Status(t, l, 1); st.Persistence != tt.prof {
				t.Fatalf("status %+v: want %s", st, tt.prof)
			}
			faultcheck.PowerLoss(t, l, 1, tt.prof)
			if tt.prof == node.PersistEverysec {
				faultcheck.Kill(t, l, 1, faultcheck.GuardDelay, true)
				faultcheck.PowerLoss(t, l, 1, tt.prof) // the history restarted after the cut
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
	if _, err := l.PowerLoss(ctx, 1); !errors.Is(err, node.ErrNotRunning) {
		t.Errorf("power loss of a stopped node: got %v, want node.ErrNotRunning", err)
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
	if pl := res.PowerLoss; pl == nil || pl.Model != node.PowerLossFilesystem {
		t.Errorf("power loss of an RDB-only node: got %+v, want the filesystem model", pl)
	}
	faultcheck.Eventually(t, 20*time.Second, "node back after the power loss", func() error { return faultcheck.Ping(t, l, 1, 300*time.Millisecond) })
}

// aclConf is what envs/local renders for ACLs, reduced to the users the
// supervisor and these tests use.
func aclConf(c node.Credentials) string {
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
	creds, err := node.EnsureCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	l := runTestSupervisor(t, prepareTestNodeIn(t, dir, aclConf(creds)))
	if err := faultcheck.PingAddr(l.addr(), node.User{}, time.Second); !redis.IsAuthError(err) {
		t.Fatalf("PING without a login: got %v, want an auth error (ACLs are on)", err)
	}
	faultcheck.ClockJump(t, l, 1)
	faultcheck.Kill(t, l, 1, faultcheck.GuardDelay, true)
	faultcheck.PowerLoss(t, l, 1, node.PersistEverysec)
}

// prepareReplicatedTestNode writes node 1 with an asynchronous replica,
// ACLs on as in the lab.
func prepareReplicatedTestNode(t *testing.T) node.Spec {
	t.Helper()
	dir := t.TempDir()
	creds, err := node.EnsureCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	spec := prepareTestNodeIn(t, dir, aclConf(creds))
	spec.ReplicaPort, spec.ReplicaLinkPort = redlocktest.FreePort(t), redlocktest.FreePort(t)
	nd := node.Dir(dir, 1)
	spec.ReplicaConf = fmt.Appendf(append([]byte{}, spec.Conf...), "port %d\ndir %s/replica/data\nlogfile %q\n",
		spec.ReplicaPort, nd, nd+"/replica/redis.log")
	if err := node.Prepare(spec); err != nil {
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
	st := faultcheck.Status(t, l, 1)
	if st.Replica == nil || st.Replica.State != node.Up || !st.Replica.Synced || st.Replica.Addr != fmt.Sprintf("127.0.0.1:%d", spec.ReplicaPort) {
		t.Fatalf("replicated node: replica %+v, want up and synced on port %d", st.Replica, spec.ReplicaPort)
	}
	faultcheck.Failover(t, l, 1, 2*time.Second)

	// A node without a replica refuses a failover, saying why.
	plain := runTestSupervisor(t, prepareTestNode(t))
	if _, err := plain.Failover(context.Background(), 1, 0); !errors.Is(err, node.ErrInvalid) || !strings.Contains(err.Error(), "the lab needs replicas") {
		t.Errorf("failover of a node without a replica: got %v, want ErrInvalid saying it has no replica", err)
	}
	if _, err := l.Failover(context.Background(), 1, -time.Second); !errors.Is(err, node.ErrInvalid) {
		t.Errorf("negative lag: got %v, want node.ErrInvalid", err)
	}
}

// TestSupervisorACLNeedsCredentials: a node with ACL users and no
// credentials file cannot be supervised, and says why.
func TestSupervisorACLNeedsCredentials(t *testing.T) {
	dir := t.TempDir()
	creds, err := node.NewCredentials()
	if err != nil {
		t.Fatal(err)
	}
	spec := prepareTestNodeIn(t, dir, aclConf(creds))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = node.Run(ctx, spec.StateDir, spec.ID, nil)
	if !errors.Is(err, node.ErrNoCredentials) {
		t.Errorf("Run without credentials: got %v, want node.ErrNoCredentials", err)
	}
}

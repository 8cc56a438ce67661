package etcdtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/redlocklab/redlocklab/internal/etcdstatus"
	"github.com/redlocklab/redlocklab/internal/etcdtest"
)

func put(t *testing.T, c *etcdtest.Cluster, key, val string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli := c.Client()
	if _, err := cli.Put(ctx, key, val); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != val {
		t.Fatalf("get %s: got %v, want one value %q", key, resp.Kvs, val)
	}
}

func TestSingleMember(t *testing.T) {
	c := etcdtest.Start(t, 1, etcdtest.Options{})
	if got := c.WaitLeader(); got != c.Members[0] {
		t.Fatalf("leader: got %s, want m1", got.Name)
	}
	put(t, c, "k", "v")
}

func TestThreeMembersKillLeader(t *testing.T) {
	c := etcdtest.Start(t, 3, etcdtest.Options{})
	if len(c.Endpoints()) != 3 {
		t.Fatalf("endpoints: got %v, want 3", c.Endpoints())
	}
	old := c.WaitLeader()
	put(t, c, "before", "1")

	old.Kill()
	if old.Running() {
		t.Fatalf("%s still running after Kill", old.Name)
	}
	next := c.WaitLeader(old)
	t.Logf("leader %s killed, %s leads now", old.Name, next.Name)
	put(t, c, "after", "2")

	old.Restart()
	c.WaitHealthy()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The restarted member replayed its log and caught up: it serves what
	// was written while it was down.
	resp, err := old.Client().Get(ctx, "after", clientv3.WithSerializable())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get after on restarted %s: got %v, %v; want one value", old.Name, resp, err)
	}
}

func TestStopLeaderThenCont(t *testing.T) {
	c := etcdtest.Start(t, 3, etcdtest.Options{})
	old := c.WaitLeader()
	old.Stop()
	next := c.WaitLeader(old)
	if !old.Running() {
		t.Fatalf("%s is not running after Stop; want it frozen, not gone", old.Name)
	}
	put(t, c, "k", "v")
	old.Cont()
	// Healthy means a linearizable read went through: the old leader has
	// learnt of the new term and follows whoever leads now.
	c.WaitHealthy()
	leader := c.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	id, err := leader.ID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := etcdstatus.Get(ctx, old.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	if s.Leader != id {
		t.Fatalf("%s after Cont follows %x, want the leader %s (%x); %s led while it was stopped", old.Name, s.Leader, leader.Name, id, next.Name)
	}
}

func TestLeaderWithoutQuorum(t *testing.T) {
	c := etcdtest.Start(t, 3, etcdtest.Options{})
	leader := c.WaitLeader()
	for _, m := range c.Members {
		if m != leader {
			m.Kill()
		}
	}
	// The leader steps down within an election timeout (CheckQuorum); until
	// then it names itself, but no majority of the cluster does.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m, err := c.Leader(ctx)
	if !errors.Is(err, etcdstatus.ErrNoLeader) {
		t.Fatalf("leader with one of three members alive: got %v, %v; want ErrNoLeader", m, err)
	}
}

func TestBinaryFromEnv(t *testing.T) {
	t.Setenv("REDLAB_ETCD_BIN", "/nonexistent/etcd")
	_, err := etcdtest.Binary()
	if err == nil || !strings.Contains(err.Error(), "REDLAB_ETCD_BIN=/nonexistent/etcd") {
		t.Fatalf("Binary with a bad REDLAB_ETCD_BIN: got %v, want an error naming it", err)
	}
}

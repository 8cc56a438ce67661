package lab

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/etcdstatus"
	"github.com/redlocklab/redlocklab/internal/faultcheck"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// etcdLabOffsets are the port ranges of a lab with etcd members.
var etcdLabOffsets = append(PortOffsets(0), etcdPortOffsets...)

func etcdClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func etcdPut(cli *clientv3.Client, key, val string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := cli.Put(ctx, key, val)
	return err
}

// TestLabEtcd provisions a lab with three etcd members next to one Redis
// node through the real tofu/terraform: the members elect a leader and take
// writes through their client fronts; killing the leader through the
// control endpoint (target "leader") elects another, and the killed member
// rejoins after the restart delay; partitioning the leader at its fronts
// silences it for clients and peers (another member leads, the partitioned
// one commits nothing) until heal; down leaves no process, port or file.
func TestLabEtcd(t *testing.T) {
	redlab, tf := testenv.RequireLab(t, FindTerraform)
	infra := filepath.Join(testenv.RepoRoot(t), "infra")
	etcd, err := FindEtcd(redlab, infra)
	if err != nil {
		testenv.Missing(t, err.Error())
	}
	const members = 3
	const delay = 2 * time.Second
	dir := filepath.Join(t.TempDir(), "lab")
	base := redistest.FreeStableBasePort(t, members, etcdLabOffsets...)
	cfg := Config{Profile: profile.Profile{Nodes: 1, RestartDelay: delay, Etcd: members, PowerLoss: true},
		StateDir: dir, BasePort: base,
		Redlab: redlab, Terraform: tf, InfraDir: infra, EtcdServer: etcd,
	}
	ctx := context.Background()
	downDone := false
	t.Cleanup(func() {
		if !downDone {
			if err := Down(context.Background(), cfg); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})

	l, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ms := l.EtcdMembers()
	if len(ms) != members {
		t.Fatalf("etcd members: got %+v, want %d", ms, members)
	}
	for i, m := range ms {
		if want := fmt.Sprintf("127.0.0.1:%d", base+etcdClientFrontOffset+i+1); m.ID != i+1 || m.Client != want {
			t.Errorf("etcd member %d: got %+v, want id %d with its client front at %s", i+1, m, i+1, want)
		}
	}
	cli := etcdClient(t, l.EtcdEndpoints())
	if err := etcdPut(cli, "before", "1", 10*time.Second); err != nil {
		t.Fatalf("put through the fronts: %v", err)
	}

	var leader int
	faultcheck.Eventually(t, 15*time.Second, "a leader", func() error {
		leader, err = l.EtcdLeader(ctx)
		return err
	})
	sts, err := l.EtcdStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.State != node.Up || st.EtcdPID == 0 || st.MemberID == "" {
			t.Errorf("etcd member %d: status %+v, want up with a pid and a member ID", st.ID, st)
		}
	}
	if st := sts[leader-1]; st.Leader != st.MemberID {
		t.Errorf("leader %d's own status names %s as leader, want itself (%s)", leader, st.Leader, st.MemberID)
	}

	t.Run("kill the leader", func(t *testing.T) {
		res, err := l.EtcdKill(ctx, TargetLeader)
		if err != nil {
			t.Fatal(err)
		}
		if res.ID == "" || res.Params["etcd_member"] != strconv.Itoa(leader) || res.Params["target"] != "leader" {
			t.Fatalf("kill of the leader %d recorded as %+v, want etcd_member %d and target leader", leader, res.Result, leader)
		}
		if res.Status.State != node.Waiting || res.Status.EtcdPID != 0 {
			t.Errorf("killed member's status %+v, want waiting without a pid", res.Status)
		}
		var next int
		faultcheck.Eventually(t, 20*time.Second, "a new leader", func() error {
			id, err := l.EtcdLeader(ctx)
			if err != nil {
				return err
			}
			if id == leader {
				return fmt.Errorf("member %d, killed, still named leader", id)
			}
			next = id
			return nil
		})
		t.Logf("leader %d killed, member %d leads", leader, next)
		if err := etcdPut(cli, "after", "2", 10*time.Second); err != nil {
			t.Fatalf("put with the old leader down: %v", err)
		}
		// Back after the restart delay, the fault ends when it answers.
		faultcheck.FaultEnded(t, l, res.ID, nil)
		faultcheck.Eventually(t, 20*time.Second, "the killed member healthy", func() error {
			hctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			return etcdstatus.Healthy(hctx, "http://"+ms[leader-1].EtcdClient)
		})
	})

	// etcd fsyncs its WAL before it acknowledges: a power cut of a
	// majority at once, on the filesystem model, loses no acknowledged
	// write.
	t.Run("power loss of a majority", func(t *testing.T) {
		const n = 50
		for i := range n {
			if err := etcdPut(cli, fmt.Sprintf("pl/%d", i), "v", 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		errs := make(chan error, 2)
		for _, m := range []int{1, 2} {
			go func() {
				res, err := l.EtcdPowerLoss(ctx, m)
				if err == nil && (res.PowerLoss == nil || res.PowerLoss.Model != PowerLossFilesystem) {
					err = fmt.Errorf("member %d: power-loss result %+v, want the filesystem model", m, res.PowerLoss)
				}
				if err == nil {
					t.Logf("member %d: power loss cut %d bytes from %v", m, res.PowerLoss.CutBytes, res.PowerLoss.CutFiles)
				}
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		var got int64
		faultcheck.Eventually(t, 60*time.Second, "every acknowledged key back", func() error {
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			r, err := cli.Get(gctx, "pl/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return err
			}
			if got = r.Count; got != n {
				return fmt.Errorf("%d of %d keys", got, n)
			}
			return nil
		})
	})

	t.Run("partition the leader", func(t *testing.T) {
		var old int
		faultcheck.Eventually(t, 20*time.Second, "a leader", func() error {
			var err error
			old, err = l.EtcdLeader(ctx)
			return err
		})
		res, err := l.EtcdPartition(ctx, TargetLeader)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.EtcdHeal(ctx) }) // also when a check below fails
		if !res.Status.Partitioned || res.ID == "" || res.Params["etcd_member"] != strconv.Itoa(old) || res.Params["target"] != "leader" {
			t.Fatalf("partition of the leader %d: got %+v, want partitioned and recorded as the leader", old, res)
		}
		// Clients of its front see silence.
		one := etcdClient(t, []string{l.EtcdEndpoints()[old-1]})
		if err := etcdPut(one, "partitioned", "x", time.Second); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("put through the partitioned member %d's front: got %v, want a time-out", old, err)
		}
		// Its peers stop hearing it: another member leads, at a higher
		// term, and takes writes.
		var next int
		faultcheck.Eventually(t, 20*time.Second, "a new leader", func() error {
			id, err := l.EtcdLeader(ctx)
			if err != nil {
				return err
			}
			if id == old {
				return fmt.Errorf("member %d, partitioned, still leads", id)
			}
			next = id
			return nil
		})
		// Through the others: a client of all three may send it into the
		// partitioned member's open, silent connection (as a real one
		// would, without keep-alives), and wait there.
		var others []string
		for i, ep := range l.EtcdEndpoints() {
			if i+1 != old {
				others = append(others, ep)
			}
		}
		if err := etcdPut(etcdClient(t, others), "during", "3", 10*time.Second); err != nil {
			t.Fatalf("put through the other members with the leader partitioned: %v", err)
		}
		sts, err := l.EtcdStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Nothing it sends arrives, so it applies nothing of the new term.
		if cut, lead := sts[old-1], sts[next-1]; cut.RaftTerm >= lead.RaftTerm {
			t.Errorf("partitioned member %d at applied term %d, new leader %d at %d: want it behind", old, cut.RaftTerm, next, lead.RaftTerm)
		}
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = etcdstatus.Healthy(hctx, "http://"+ms[old-1].EtcdClient)
		cancel()
		if err == nil {
			t.Errorf("partitioned member %d reports itself healthy (a linearizable read went through)", old)
		}

		if err := l.EtcdHeal(ctx); err != nil {
			t.Fatal(err)
		}
		faultcheck.FaultEnded(t, l, res.ID, nil)
		faultcheck.Eventually(t, 20*time.Second, "the healed member healthy", func() error {
			hctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			return etcdstatus.Healthy(hctx, "http://"+ms[old-1].EtcdClient)
		})
		// A new client: the partition swallowed the old one's handshake,
		// which gRPC retries only after its connect timeout.
		healed := etcdClient(t, []string{l.EtcdEndpoints()[old-1]})
		faultcheck.Eventually(t, 10*time.Second, "a put through the healed front", func() error {
			return etcdPut(healed, "healed", "y", 2*time.Second)
		})
	})

	t.Run("pause, stop and start, restart at once, latency on a follower", func(t *testing.T) {
		var lead int
		faultcheck.Eventually(t, 20*time.Second, "a leader", func() error {
			var err error
			lead, err = l.EtcdLeader(ctx)
			return err
		})
		f := 1 + lead%members
		healthy := func(what string) {
			t.Helper()
			faultcheck.Eventually(t, 20*time.Second, what, func() error {
				hctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				return etcdstatus.Healthy(hctx, "http://"+ms[f-1].EtcdClient)
			})
		}
		res, err := l.EtcdPause(ctx, f, time.Second)
		if err != nil || res.Status.State != node.Paused {
			t.Fatalf("pause of member %d: got %+v, %v; want paused", f, res.Status, err)
		}
		faultcheck.FaultEnded(t, l, res.ID, map[string]string{"for": "1s"})
		healthy("member healthy after the pause")

		res, err = l.EtcdStop(ctx, f)
		if err != nil || res.Status.State != node.Stopped || res.Status.EtcdPID != 0 {
			t.Fatalf("stop of member %d: got %+v, %v; want stopped without a pid", f, res.Status, err)
		}
		stopID := res.ID
		if _, err := l.EtcdStart(ctx, f); err != nil {
			t.Fatal(err)
		}
		faultcheck.FaultEnded(t, l, stopID, nil)
		healthy("member healthy after start")

		res, err = l.EtcdRestart(ctx, f, 0)
		if err != nil {
			t.Fatal(err)
		}
		faultcheck.FaultEnded(t, l, res.ID, map[string]string{"delay": "0s"})
		healthy("member healthy after a restart at once")

		res, err = l.EtcdLatency(ctx, f, 50*time.Millisecond, 0)
		if err != nil || time.Duration(res.Status.Latency) != 50*time.Millisecond {
			t.Fatalf("latency on member %d: got %+v, %v; want 50ms", f, res.Status, err)
		}
		if err := etcdPut(etcdClient(t, []string{l.EtcdEndpoints()[f-1]}), "slow", "z", 10*time.Second); err != nil {
			t.Errorf("put through member %d's slow front: %v", f, err)
		}
		if err := l.EtcdHeal(ctx, f); err != nil {
			t.Fatal(err)
		}
		faultcheck.FaultEnded(t, l, res.ID, map[string]string{"add": "50ms"})

		// Given a for, a partition ends on the member's supervisor, with
		// no heal sent.
		res, err = l.EtcdApply(ctx, f, fault.Partition, fault.Params{fault.For: {D: time.Second}})
		if err != nil || !res.Status.Partitioned {
			t.Fatalf("partition of member %d for 1s: got %+v, %v; want partitioned", f, res.Status, err)
		}
		faultcheck.FaultEnded(t, l, res.ID, map[string]string{"for": "1s", "ended_by": "for"})
		healthy("member healthy after its partition's for")
	})

	if err := Down(ctx, cfg); err != nil {
		t.Fatalf("down: %v", err)
	}
	downDone = true
	if left := leftovers(dir); len(left) > 0 {
		t.Errorf("processes left after down: %v", left)
	}
	if !redistest.PortsFree(base, members, etcdLabOffsets...) {
		t.Errorf("ports of the lab still in use after down")
	}
	if fileExists(dir) {
		t.Errorf("state dir %s still there after down", dir)
	}
}

package lab

import (
	"context"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/redlocklab/redlocklab/internal/faultcheck"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// TestLabEtcdNoFsyncPowerLoss is the negative control of "power loss of a
// majority" in TestLabEtcd: the same cut, two of three members at once,
// on members declared unsafe-no-fsync (Config.EtcdUnsafeNoFsync), after
// writes that only those two hold: the cluster comes back and has lost
// them.
func TestLabEtcdNoFsyncPowerLoss(t *testing.T) {
	redlab, tf := testenv.RequireLab(t, FindTerraform)
	infra := filepath.Join(testenv.RepoRoot(t), "infra")
	etcd, err := FindEtcd(redlab, infra)
	if err != nil {
		testenv.Missing(t, err.Error())
	}
	const members = 3
	dir := filepath.Join(t.TempDir(), "lab")
	base := redistest.FreeStableBasePort(t, members, etcdLabOffsets...)
	cfg := Config{Profile: profile.Profile{Nodes: 1, NoRestartDelay: true, Etcd: members, EtcdUnsafeNoFsync: true, PowerLoss: true},
		StateDir: dir, BasePort: base,
		Redlab: redlab, Terraform: tf, InfraDir: infra, EtcdServer: etcd,
	}
	ctx := context.Background()
	t.Cleanup(func() {
		if err := Down(context.Background(), cfg); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	l, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := Open(dir); err != nil || !again.EtcdUnsafeNoFsync() {
		t.Fatalf("Open: etcd unsafe-no-fsync %v (%v), want true from the state file", again != nil && again.EtcdUnsafeNoFsync(), err)
	}
	for m := 1; m <= members; m++ {
		conf, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("etcd%d", m), "etcd.yml"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(conf), `"unsafe-no-fsync": true`) {
			t.Errorf("member %d's etcd.yml keeps fsync on:\n%s", m, conf)
		}
	}
	cli := etcdClient(t, l.EtcdEndpoints())
	if err := etcdPut(cli, "before", "1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Member 3 is stopped while the keys are written, so that only the two
	// members about to lose power hold them. (Partitioning it at its fronts
	// is not enough: it still reads the others' messages over the streams
	// it opened to their fronts, and repairs them from its own log.)
	if _, err := l.EtcdStop(ctx, 3); err != nil {
		t.Fatal(err)
	}
	majority := etcdClient(t, l.EtcdEndpoints()[:2])
	const n = 50
	for i := range n {
		if err := etcdPut(majority, fmt.Sprintf("pl/%d", i), "v", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 2)
	for _, m := range []int{1, 2} {
		go func() {
			res, err := l.EtcdPowerLoss(ctx, m)
			if err == nil {
				t.Logf("member %d: power loss cut %d bytes from %v; vanished %v", m, res.PowerLoss.CutBytes, res.PowerLoss.CutFiles, res.PowerLoss.Vanished)
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.EtcdStart(ctx, 3); err != nil {
		t.Fatal(err)
	}
	cli = etcdClient(t, l.EtcdEndpoints())
	// The cluster comes back and serves, without the keys: members 1 and
	// 2 restart from what they had fsynced (nothing since they started),
	// member 3 never had the keys, and the three agree on a log without
	// them. No error says so; the acknowledged writes are simply gone.
	var got int64
	faultcheck.Eventually(t, 60*time.Second, "the cluster answers a linearizable read", func() error {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		r, err := cli.Get(gctx, "pl/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil {
			got = r.Count
		}
		return err
	})
	t.Logf("after the cut of members 1 and 2 without fsync: %d of %d acknowledged keys", got, n)
	if got >= n {
		t.Errorf("%d of %d acknowledged keys after the cut of a majority without fsync: want some lost (the control shows nothing)", got, n)
	}
}

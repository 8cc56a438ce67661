package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// TestLabEtcdNoFsyncPowerLoss is the negative control of "power loss of a
// majority" in TestLabEtcd: the same cut, two of three members at once,
// on members declared unsafe-no-fsync (Config.EtcdUnsafeNoFsync).
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
	cfg := Config{
		StateDir: dir, Count: 1, BasePort: base, NoRestartDelay: true, Etcd: members, EtcdUnsafeNoFsync: true,
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
	// Watch for a minute: what a client reads, and what the members do.
	answered, lastCount := 0, int64(-1)
	for i := 0; i < 30; i++ {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := cli.Get(gctx, "pl/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err == nil {
			answered++
			lastCount = r.Count
		}
		sts, serr := l.EtcdStatus(ctx)
		var line []string
		for _, st := range sts {
			line = append(line, fmt.Sprintf("%d:%s r%d term%d %q", st.ID, st.State, st.Restarts, st.RaftTerm, st.LastExit))
		}
		t.Logf("t+%02ds: get %v count %d; members %v %v", i*2, err, lastCount, line, serr)
		time.Sleep(time.Second)
	}
	t.Logf("answered %d of 30 reads, last count %d of %d", answered, lastCount, n)
	if answered > 0 && lastCount == n {
		t.Errorf("every acknowledged key is back after the cut of a majority without fsync: the control shows nothing")
	}
}

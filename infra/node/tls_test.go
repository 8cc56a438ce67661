package node_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/faultcheck"
	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/internal/tlscert"
	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// TestSupervisorTLS runs the supervisor of a TLS-only node (the redis-node
// tls profile, as `lab up --tls` renders it): it comes up, judged by its own
// TLS client; a TLS client reaches the node through the front; and after a
// crash the supervisor sees it up again only over TLS.
func TestSupervisorTLS(t *testing.T) {
	bin := testenv.Require(t, "redis-server")
	dir := t.TempDir()
	files, err := tlscert.Write(filepath.Join(dir, "tls"), tlscert.LabHosts, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	spec := node.Spec{
		ID: 1, StateDir: dir,
		Port: redlocktest.FreePort(t), RedisPort: redlocktest.FreePort(t), ControlPort: redlocktest.FreePort(t),
		RestartDelay: node.Duration(faultcheck.GuardDelay), RedisServer: bin, Guard: []byte(faultcheck.Guard),
	}
	nd := node.Dir(dir, 1)
	spec.Conf = fmt.Appendf(nil, "bind 127.0.0.1\nport 0\ntls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients no\n"+
		"daemonize no\ndir %s/data\nlogfile %q\nappendonly yes\nappendfsync always\nsave \"\"\nmaxmemory-policy noeviction\n",
		spec.RedisPort, files.Cert, files.Key, files.CA, nd, nd+"/redis.log")
	if err := node.Prepare(spec); err != nil {
		t.Fatal(err)
	}
	l := runTestSupervisor(t, spec)

	cfg, err := nodeaddr.TLSFiles{CA: files.CA}.Config()
	if err != nil {
		t.Fatal(err)
	}
	c := redlock.NewNodes([]string{l.addr()}, redlock.WithTLS(cfg), redlock.WithNodeTimeout(2*time.Second))[0]
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET over TLS through the front: %v", err)
	}
	if _, err := l.Kill(ctx, 1); err != nil {
		t.Fatal(err)
	}
	faultcheck.Eventually(t, 30*time.Second, "the node up again after the kill", func() error {
		st, err := l.NodeStatus(ctx, 1)
		if err != nil {
			return err
		}
		if st.State != node.Up || st.Restarts != 1 {
			return fmt.Errorf("state %s, %d restarts; want up after 1", st.State, st.Restarts)
		}
		return nil
	})
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Errorf("GET over TLS after the restart: %q, %v; want v (appendfsync always)", got, err)
	}
}

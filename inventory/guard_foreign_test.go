package inventory

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/inventory/internal/foreign"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// TestForeignGuardHolds: a reservation through node-redlock records its
// hold on this process's clock, valid until the acquire's send time plus
// the validity the client claimed: after the grant, no later than the TTL
// after it.
func TestForeignGuardHolds(t *testing.T) {
	cluster := startRedis(t, 3)
	tl := &tally{}
	const ttl = 5 * time.Second
	s := replica(t, openStore(t, sqliteDSN(t)), GuardNodeRedlock, cluster, WithLockTTL(ttl), WithHoldObserver(tl.hold))
	seed(t, s.Store(), "f", 3)
	r, err := s.Reserve(context.Background(), Request{SKU: "f", Quantity: 1, RequestID: "f-1"})
	if err != nil || r.Timing.Attempts != 1 || r.Timing.Acquire <= 0 {
		t.Fatalf("Reserve: got %+v, %v; want a reservation after 1 attempt", r, err)
	}
	if len(tl.holds) != 1 {
		t.Fatalf("holds: got %d, want 1", len(tl.holds))
	}
	h := tl.holds[0]
	if h.Key != lockKey("f") || len(h.Token) != 32 || !h.ValidUntil.After(h.Granted) || h.ValidUntil.After(h.Granted.Add(ttl)) || h.Released.Before(h.Granted) {
		t.Errorf("hold %+v: want lock:sku:f, node-redlock's 32-hex token, granted < valid until <= granted + %v", h, ttl)
	}
	if v := strings.Join(redlocktest.Values(t, cluster.Nodes, lockKey("f")), ""); v != "" {
		t.Errorf("after the reservation the nodes hold %q, want the lock released", v)
	}
	if rd := s.Readiness(context.Background()); !rd.Ready() {
		t.Errorf("readiness: got %+v, want ready", rd)
	}
}

// TestForeignGuardAdapterDies: once the adapter is gone, reservations are
// unavailable at once (not hung until the acquire timeout), and /readyz
// says why.
func TestForeignGuardAdapterDies(t *testing.T) {
	cluster := startRedis(t, 3)
	s := replica(t, openStore(t, sqliteDSN(t)), GuardNodeRedlock, cluster, WithAcquireTimeout(time.Hour))
	seed(t, s.Store(), "d", 3)
	fg := s.g.(*foreignGuard)
	if err := syscall.Kill(fg.c.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for fg.c.Err() == nil && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	_, err := s.Reserve(ctx, Request{SKU: "d", Quantity: 1, RequestID: "d-1"})
	var ee *foreign.ExitError
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ee) {
		t.Errorf("Reserve after the adapter died: got %v, want ErrUnavailable from its ExitError", err)
	}
	if rd := s.Readiness(ctx); rd.Ready() || !strings.Contains(rd.Lock.Error(), "signal: killed") {
		t.Errorf("readiness: got %+v, want not ready, saying the adapter was killed", rd)
	}
}

// TestForeignAdapterCommand: the adapter is the executable its variable
// names, its stderr goes to the replica's log directory, and a variable
// that names nothing runnable says so.
func TestForeignAdapterCommand(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "adapter.sh")
	body := "#!/bin/sh\necho \"fake adapter for $REDLAB_NODES, args $*\" >&2\necho '{\"protocol\":1,\"client\":\"fake\"}'\nexec cat >/dev/null\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("REDLAB_NODE_REDLOCK_ADAPTER", script)
	logs := t.TempDir()
	r, err := OpenReplica(context.Background(), ReplicaConfig{StoreDSN: sqliteDSN(t), Guard: GuardNodeRedlockDel,
		Nodes: []string{"127.0.0.1:1", "127.0.0.1:2"}, Holder: "replica-7", LogDir: logs})
	if err != nil {
		t.Fatalf("OpenReplica: %v", err)
	}
	if fg := r.Service().g.(*foreignGuard); fg.c.ClientName() != "fake" {
		t.Errorf("client: got %q, want the fake's", fg.c.ClientName())
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(logs, "adapter-replica-7.log"))
	if want := "fake adapter for 127.0.0.1:1,127.0.0.1:2, args --release-with-del\n"; err != nil || string(b) != want {
		t.Errorf("adapter log: got %q, %v; want %q", b, err, want)
	}

	t.Setenv("REDLAB_NODE_REDLOCK_ADAPTER", filepath.Join(dir, "missing"))
	_, err = OpenReplica(context.Background(), ReplicaConfig{StoreDSN: sqliteDSN(t), Guard: GuardNodeRedlock, Nodes: []string{"127.0.0.1:1"}})
	if err == nil || !strings.Contains(err.Error(), "REDLAB_NODE_REDLOCK_ADAPTER="+filepath.Join(dir, "missing")+" is not an executable") {
		t.Errorf("a variable naming nothing: got %v, want it named", err)
	}
}

package inventory

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/etcdtest"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

func sqliteDSN(t *testing.T) string {
	t.Helper()
	return "sqlite:" + filepath.Join(t.TempDir(), "inventory.db")
}

func TestOpenReplicaRejects(t *testing.T) {
	dsn := sqliteDSN(t)
	tests := []struct {
		name string
		cfg  ReplicaConfig
		want string
	}{
		{"unknown guard", ReplicaConfig{StoreDSN: dsn, Guard: "mutex"}, `unknown guard "mutex"`},
		{"redlock without nodes", ReplicaConfig{StoreDSN: dsn, Guard: GuardRedlock}, "guard redlock needs lock nodes"},
		{"fenced without nodes", ReplicaConfig{StoreDSN: dsn, Guard: GuardRedlockFenced}, "guard redlock-fenced needs lock nodes"},
		{"redis-single without nodes", ReplicaConfig{StoreDSN: dsn, Guard: GuardRedisSingle}, "guard redis-single needs lock nodes"},
		{"bad store", ReplicaConfig{StoreDSN: "mysql://x", Guard: GuardNone}, "want sqlite:PATH or postgres://"},
		{"negative pool", ReplicaConfig{StoreDSN: dsn, Guard: GuardRedlock, Nodes: []string{"127.0.0.1:1"}, PoolSize: -1}, "pool size -1"},
		{"negative TTL", ReplicaConfig{StoreDSN: dsn, Guard: GuardDBAtomic, LockTTL: -time.Second}, "lock TTL must be positive"},
		{"etcd without endpoints", ReplicaConfig{StoreDSN: dsn, Guard: GuardEtcd}, "guard etcd needs etcd endpoints"},
		{"etcd-fenced without endpoints", ReplicaConfig{StoreDSN: dsn, Guard: GuardEtcdFenced, Nodes: []string{"127.0.0.1:1"}}, "guard etcd-fenced needs etcd endpoints"},
		{"etcd TTL below etcd's minimum", ReplicaConfig{StoreDSN: dsn, Guard: GuardEtcd, Etcd: []string{"http://127.0.0.1:1"}, LockTTL: time.Second}, "minimum lease TTL of 2s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := OpenReplica(context.Background(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "inventory: ") {
				if r != nil {
					r.Close()
				}
				t.Errorf("got %v, want an inventory: error containing %q", err, tt.want)
			}
		})
	}
}

// Every guard opens with what it needs (and no node clients for the guards
// that do not lock), reserves, reports its holds, runs its pause hook, and
// closes everything it opened, once.
func TestOpenReplicaGuards(t *testing.T) {
	c := startRedis(t, 3)
	ec := etcdtest.Start(t, 1, etcdtest.Options{})
	wantNodes := map[Guard]int{GuardNone: 0, GuardDBAtomic: 0, GuardDBVersion: 0, GuardDBForUpdate: 0, GuardRedisSingle: 1, GuardRedlock: 3, GuardRedlockFenced: 3,
		GuardRedsync: 3, GuardRedlockDel: 3}
	for _, g := range append(Guards(), Comparisons()...) {
		t.Run(string(g), func(t *testing.T) {
			ctx := context.Background()
			var holds, pauses atomic.Int64
			r, err := OpenReplica(ctx, ReplicaConfig{
				StoreDSN: sqliteDSN(t), Guard: g, Nodes: c.Addrs(), Etcd: ec.Endpoints(), NodeTimeout: 500 * time.Millisecond,
				Holder: "replica-a", LockTTL: 5 * time.Second, AcquireTimeout: 5 * time.Second,
				OnHold:    func(Hold) { holds.Add(1) },
				PauseHook: func(context.Context, Request) { pauses.Add(1) },
			})
			if err != nil {
				t.Fatalf("OpenReplica: %v", err)
			}
			t.Cleanup(func() { r.Close() })
			if len(r.nodes) != wantNodes[g] || (r.locker != nil) != g.redlock() || (r.etcd != nil) != g.NeedsEtcd() {
				t.Errorf("opened %d node clients, Redlock client %v, etcd client %v; want %d, %v, %v",
					len(r.nodes), r.locker != nil, r.etcd != nil, wantNodes[g], g.redlock(), g.NeedsEtcd())
			}
			r.Warm(ctx, 2)
			if rd := r.Service().Readiness(ctx); !rd.Ready() {
				t.Errorf("readiness: got %+v, want ready", rd)
			}
			seed(t, r.Store(), "w", 5)
			res, err := r.Service().Reserve(ctx, Request{SKU: "w", Quantity: 2, RequestID: "r1"})
			if err != nil || res.Holder != "replica-a" || res.Guard != g {
				t.Fatalf("Reserve: got %+v, %v; want a reservation by replica-a through %s", res, err, g)
			}
			wantHolds := int64(0)
			if g.Locks() {
				wantHolds = 1
			}
			if holds.Load() != wantHolds || pauses.Load() != 1 {
				t.Errorf("holds observed %d, pauses %d; want %d, 1", holds.Load(), pauses.Load(), wantHolds)
			}

			if err := r.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if err := r.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if err := r.Store().Ping(ctx); err == nil {
				t.Error("store still answers after Close")
			}
			for i, n := range r.nodes {
				if err := n.Ping(ctx).Err(); err == nil {
					t.Errorf("node client %d still answers after Close", i)
				}
			}
			if r.etcd != nil {
				if _, err := r.etcd.Get(ctx, "x"); err == nil {
					t.Error("etcd client still answers after Close")
				}
				// The service's sessions went with it: no lease is left.
				if ls, err := ec.Client().Leases(ctx); err != nil || len(ls.Leases) != 0 {
					t.Errorf("leases after Close: got %v, %v; want none", ls, err)
				}
			}
			if _, err := r.Service().Reserve(ctx, Request{SKU: "w", Quantity: 1, RequestID: "r2"}); err == nil {
				t.Error("Reserve after Close: got nil error")
			}
		})
	}
}

// The lock nodes' ACL user and password reach every node connection: with
// them the replica locks; without them, or with a wrong password, the nodes
// refuse its SETs and the lock is unavailable.
func TestOpenReplicaACL(t *testing.T) {
	c := redlocktest.Start(t, 3, redlocktest.Options{Extra: []string{
		"user default on nopass ~* &* -@all +ping", // enough for the harness's readiness PING, nothing else
		"user lab on >s3cret ~* &* +@all",
	}})
	ctx := context.Background()
	dsn := sqliteDSN(t)
	tests := []struct {
		name, user, pass string
		wantErr          error
	}{
		{"credentials", "lab", "s3cret", nil},
		{"none", "", "", ErrUnavailable},
		{"wrong password", "lab", "guess", ErrUnavailable},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := OpenReplica(ctx, ReplicaConfig{
				StoreDSN: dsn, Guard: GuardRedlock, Nodes: c.Addrs(), NodeTimeout: 500 * time.Millisecond,
				Username: tt.user, Password: tt.pass, AcquireTimeout: 300 * time.Millisecond,
			})
			if err != nil {
				t.Fatalf("OpenReplica: %v", err)
			}
			defer r.Close()
			seed(t, r.Store(), "acl", 5)
			_, err = r.Service().Reserve(ctx, Request{SKU: "acl", Quantity: 1, RequestID: "acl-" + string(rune('a'+i))})
			if (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("Reserve: got %v, want %v", err, tt.wantErr)
			}
		})
	}
}

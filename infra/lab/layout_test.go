package lab

import (
	"context"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/internal/redistest"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{StateDir: "/tmp/x"}, true},
		{"count 0 means default", Config{Profile: profile.Profile{Nodes: 0}, StateDir: "/tmp/x"}, true},
		{"too many nodes", Config{Profile: profile.Profile{Nodes: 100}, StateDir: "/tmp/x"}, false},
		{"low base port", Config{StateDir: "/tmp/x", BasePort: 80}, false},
		{"high base port", Config{StateDir: "/tmp/x", BasePort: 65400}, false},
		{"bad persistence", Config{Profile: profile.Profile{Persistence: []Persistence{"sometimes"}}, StateDir: "/tmp/x"}, false},
		{"space in state dir", Config{StateDir: "/tmp/my lab"}, false},
		{"negative delay", Config{Profile: profile.Profile{RestartDelay: -time.Second}, StateDir: "/tmp/x"}, false},
		{"no restart delay", Config{Profile: profile.Profile{NoRestartDelay: true}, StateDir: "/tmp/x"}, true},
		{"no restart delay and a delay", Config{Profile: profile.Profile{NoRestartDelay: true, RestartDelay: time.Second}, StateDir: "/tmp/x"}, false},
		{"delay over an hour", Config{Profile: profile.Profile{RestartDelay: 2 * time.Hour}, StateDir: "/tmp/x"}, false},
		{"one profile per node", Config{Profile: profile.Profile{Nodes: 3, Persistence: []Persistence{PersistAlways, PersistEverysec, PersistNone}}, StateDir: "/tmp/x"}, true},
		{"one profile for all", Config{Profile: profile.Profile{Nodes: 3, Persistence: []Persistence{PersistNone}}, StateDir: "/tmp/x"}, true},
		{"profiles for too few nodes", Config{Profile: profile.Profile{Nodes: 3, Persistence: []Persistence{PersistAlways, PersistNone}}, StateDir: "/tmp/x"}, false},
		{"profiles for too many nodes", Config{Profile: profile.Profile{Nodes: 1, Persistence: []Persistence{PersistAlways, PersistNone}}, StateDir: "/tmp/x"}, false},
		{"bad profile in the list", Config{Profile: profile.Profile{Nodes: 2, Persistence: []Persistence{PersistAlways, "sometimes"}}, StateDir: "/tmp/x"}, false},
		{"one replica per node", Config{Profile: profile.Profile{Replicas: 1}, StateDir: "/tmp/x"}, true},
		{"two replicas per node", Config{Profile: profile.Profile{Replicas: 2}, StateDir: "/tmp/x"}, false},
		{"negative replicas", Config{Profile: profile.Profile{Replicas: -1}, StateDir: "/tmp/x"}, false},
		{"replicas need room for two more ranges", Config{Profile: profile.Profile{Replicas: 1}, StateDir: "/tmp/x", BasePort: 65200}, false},
		{"no replicas fit below", Config{StateDir: "/tmp/x", BasePort: 65200}, true},
		{"three etcd members", Config{Profile: profile.Profile{Etcd: 3}, StateDir: "/tmp/x"}, true},
		{"one etcd member", Config{Profile: profile.Profile{Etcd: 1}, StateDir: "/tmp/x"}, true},
		{"an even etcd cluster", Config{Profile: profile.Profile{Etcd: 2}, StateDir: "/tmp/x"}, false},
		{"seven etcd members", Config{Profile: profile.Profile{Etcd: 7}, StateDir: "/tmp/x"}, false},
		{"etcd needs room for its ranges", Config{Profile: profile.Profile{Etcd: 3}, StateDir: "/tmp/x", BasePort: 64600}, false},
		{"etcd with machines", Config{Profile: profile.Profile{Etcd: 3, Machines: true}, StateDir: "/tmp/x"}, false},
		{"etcd without fsync", Config{Profile: profile.Profile{Etcd: 3, EtcdUnsafeNoFsync: true}, StateDir: "/tmp/x"}, true},
		{"no fsync without etcd", Config{Profile: profile.Profile{EtcdUnsafeNoFsync: true}, StateDir: "/tmp/x"}, false},
		{"tls", Config{Profile: profile.Profile{TLS: true, Etcd: 3}, StateDir: "/tmp/x"}, true},
		{"tls with replicas", Config{Profile: profile.Profile{TLS: true, Replicas: 1}, StateDir: "/tmp/x"}, false},
		{"tls with machines", Config{Profile: profile.Profile{TLS: true, Machines: true}, StateDir: "/tmp/x"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.cfg.withDefaults()
			if (err == nil) != tt.ok {
				t.Errorf("got %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestConfigVars(t *testing.T) {
	cfg, err := Config{Profile: profile.Profile{RestartDelay: 1500 * time.Millisecond, Persistence: []Persistence{PersistNone}}, StateDir: "/tmp/x",
		Redlab: "/bin/redlab", RedisServer: "/usr/bin/redis-server"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"node_count": "5", "base_port": "7100", "persistence": `["none","none","none","none","none"]`, "restart_delay_seconds": "1.5",
		"state_dir": "/tmp/x", "redlab_bin": "/bin/redlab", "redis_server_path": "/usr/bin/redis-server", "replicas": "0",
		"machines": "false", "machine_ssh": "false", "etcd_count": "0", "plain_disks": "true", "etcd_unsafe_no_fsync": "false",
	}
	got := cfg.vars()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("var %s: got %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d vars, want %d: %v", len(got), len(want), got)
	}

	cfg, err = Config{Profile: profile.Profile{Nodes: 3, NoRestartDelay: true, Persistence: []Persistence{PersistAlways, PersistEverysec, PersistNone}}, StateDir: "/tmp/x"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	got = cfg.vars()
	if got["persistence"] != `["always","everysec","none"]` || got["restart_delay_seconds"] != "0" {
		t.Errorf("per-node profiles, no delay: persistence %s restart_delay_seconds %s, want [\"always\",\"everysec\",\"none\"] and 0",
			got["persistence"], got["restart_delay_seconds"])
	}
	if cfg.Uniform() != "mixed" {
		t.Errorf("persistence of a mixed lab: got %q, want mixed", cfg.Uniform())
	}

	cfg, err = Config{Profile: profile.Profile{Etcd: 3}, StateDir: "/tmp/x", EtcdServer: "/opt/bin/etcd"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	got = cfg.vars()
	if got["etcd_count"] != "3" || got["etcd_server_path"] != "/opt/bin/etcd" || got["etcd_unsafe_no_fsync"] != "false" {
		t.Errorf("etcd: etcd_count %q etcd_server_path %q, want 3 and /opt/bin/etcd", got["etcd_count"], got["etcd_server_path"])
	}
	if _, ok := got["tls_dir"]; ok {
		t.Errorf("a plain lab passes tls_dir %q", got["tls_dir"])
	}
	cfg, err = Config{Profile: profile.Profile{Etcd: 3, EtcdUnsafeNoFsync: true}, StateDir: "/tmp/x", EtcdServer: "/opt/bin/etcd"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.vars()["etcd_unsafe_no_fsync"]; got != "true" {
		t.Errorf("etcd without fsync: etcd_unsafe_no_fsync %q, want true", got)
	}
	if cfg, err = (Config{Profile: profile.Profile{TLS: true}, StateDir: "/tmp/x"}).withDefaults(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.vars()["tls_dir"]; got != "/tmp/x/tls" {
		t.Errorf("tls: tls_dir %q, want /tmp/x/tls", got)
	}
}

// TestDownLeavesForeignDirectoriesAlone: --state-dir may point at a
// directory that is not a lab; down must not delete what it did not make.
func TestDownLeavesForeignDirectoriesAlone(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"node1", "tf"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "faults.jsonl"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Down(context.Background(), Config{StateDir: dir}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"node1", "tf", "faults.jsonl"} {
		if !fileExists(filepath.Join(dir, p)) {
			t.Errorf("down removed %s from a directory that holds no lab", p)
		}
	}
	if err := Down(context.Background(), Config{StateDir: filepath.Join(dir, "absent")}); err != nil {
		t.Errorf("down of a missing state dir: %v, want nil", err)
	}
}

func TestCheckPorts(t *testing.T) {
	dir := t.TempDir()
	// A base whose ports are all free, then node 2's control port taken: a
	// port picked by the kernel could put the lab's other ports in the
	// ephemeral range where parallel tests' connections come and go.
	base := freeBasePort(t, 3)
	taken := base + controlPortOffset + 2
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", taken))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := Config{Profile: profile.Profile{Nodes: 3}, StateDir: dir, BasePort: base}
	err = checkPorts(cfg)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("node 2's control endpoint port %d is in use", taken)) {
		t.Errorf("got %v, want node 2's control endpoint port %d reported", err, taken)
	}
	// A node the lab already has keeps its ports.
	if err := os.MkdirAll(node.Dir(dir, 2), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := node.Spec{ID: 2, Port: cfg.BasePort + 2, RedisPort: cfg.BasePort + redisPortOffset + 2, ControlPort: taken}
	if err := atomicfile.WriteJSON(filepath.Join(node.Dir(dir, 2), "spec.json"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkPorts(cfg); err != nil {
		t.Errorf("ports of an existing node: got %v, want nil", err)
	}
	// Replicas add two ranges, checked too.
	cfg.Replicas = 1
	linkTaken := base + replicaLinkOffset + 3
	l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", linkTaken))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if err := checkPorts(cfg); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("node 3's replica link front port %d is in use", linkTaken)) {
		t.Errorf("replica link port taken: got %v, want node 3's replica link front port %d reported", err, linkTaken)
	}
	// etcd members add their five ranges.
	cfg.Replicas = 0
	cfg.Etcd = 3
	if !redistest.PortsFree(base, 3, etcdPortOffsets...) {
		t.Skip("the etcd ranges of this base are in use already; nothing to check")
	}
	peerTaken := base + etcdPeerFrontOffset + 2
	l3, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", peerTaken))
	if err != nil {
		t.Fatal(err)
	}
	defer l3.Close()
	if err := checkPorts(cfg); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("etcd member 2's port %d", peerTaken)) {
		t.Errorf("etcd peer front port taken: got %v, want etcd member 2's port %d reported", err, peerTaken)
	}
}

package lab

import (
	"context"
	"fmt"
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
		{"count 0 means default", Config{StateDir: "/tmp/x", Count: 0}, true},
		{"too many nodes", Config{StateDir: "/tmp/x", Count: 100}, false},
		{"low base port", Config{StateDir: "/tmp/x", BasePort: 80}, false},
		{"high base port", Config{StateDir: "/tmp/x", BasePort: 65400}, false},
		{"bad persistence", Config{StateDir: "/tmp/x", Persistence: "sometimes"}, false},
		{"space in state dir", Config{StateDir: "/tmp/my lab"}, false},
		{"negative delay", Config{StateDir: "/tmp/x", RestartDelay: -time.Second}, false},
		{"no restart delay", Config{StateDir: "/tmp/x", NoRestartDelay: true}, true},
		{"no restart delay and a delay", Config{StateDir: "/tmp/x", NoRestartDelay: true, RestartDelay: time.Second}, false},
		{"delay over an hour", Config{StateDir: "/tmp/x", RestartDelay: 2 * time.Hour}, false},
		{"one profile per node", Config{StateDir: "/tmp/x", Count: 3, NodePersistence: []Persistence{PersistAlways, PersistEverysec, PersistNone}}, true},
		{"one profile for all", Config{StateDir: "/tmp/x", Count: 3, NodePersistence: []Persistence{PersistNone}}, true},
		{"profiles for too few nodes", Config{StateDir: "/tmp/x", Count: 3, NodePersistence: []Persistence{PersistAlways, PersistNone}}, false},
		{"profiles for too many nodes", Config{StateDir: "/tmp/x", Count: 1, NodePersistence: []Persistence{PersistAlways, PersistNone}}, false},
		{"bad profile in the list", Config{StateDir: "/tmp/x", Count: 2, NodePersistence: []Persistence{PersistAlways, "sometimes"}}, false},
		{"both fields, agreeing", Config{StateDir: "/tmp/x", Persistence: PersistNone, NodePersistence: []Persistence{PersistNone}}, true},
		{"both fields, disagreeing", Config{StateDir: "/tmp/x", Persistence: PersistNone, NodePersistence: []Persistence{PersistAlways}}, false},
		{"one replica per node", Config{StateDir: "/tmp/x", Replicas: 1}, true},
		{"two replicas per node", Config{StateDir: "/tmp/x", Replicas: 2}, false},
		{"negative replicas", Config{StateDir: "/tmp/x", Replicas: -1}, false},
		{"replicas need room for two more ranges", Config{StateDir: "/tmp/x", Replicas: 1, BasePort: 65200}, false},
		{"no replicas fit below", Config{StateDir: "/tmp/x", BasePort: 65200}, true},
		{"three etcd members", Config{StateDir: "/tmp/x", Etcd: 3}, true},
		{"one etcd member", Config{StateDir: "/tmp/x", Etcd: 1}, true},
		{"an even etcd cluster", Config{StateDir: "/tmp/x", Etcd: 2}, false},
		{"seven etcd members", Config{StateDir: "/tmp/x", Etcd: 7}, false},
		{"etcd needs room for its ranges", Config{StateDir: "/tmp/x", Etcd: 3, BasePort: 64600}, false},
		{"etcd with machines", Config{StateDir: "/tmp/x", Etcd: 3, Machines: true}, false},
		{"etcd without fsync", Config{StateDir: "/tmp/x", Etcd: 3, EtcdUnsafeNoFsync: true}, true},
		{"no fsync without etcd", Config{StateDir: "/tmp/x", EtcdUnsafeNoFsync: true}, false},
		{"tls", Config{StateDir: "/tmp/x", TLS: true, Etcd: 3}, true},
		{"tls with replicas", Config{StateDir: "/tmp/x", TLS: true, Replicas: 1}, false},
		{"tls with machines", Config{StateDir: "/tmp/x", TLS: true, Machines: true}, false},
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
	cfg, err := Config{StateDir: "/tmp/x", RestartDelay: 1500 * time.Millisecond, Persistence: PersistNone,
		Redlab: "/bin/redlab", RedisServer: "/usr/bin/redis-server"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"node_count": "5", "base_port": "7100", "persistence": `["none","none","none","none","none"]`, "restart_delay_seconds": "1.5",
		"state_dir": "/tmp/x", "redlab_bin": "/bin/redlab", "redis_server_path": "/usr/bin/redis-server", "replicas": "0",
		"machines": "false", "machine_ssh": "false", "etcd_count": "0", "plain_disks": "false", "etcd_unsafe_no_fsync": "false",
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

	cfg, err = Config{StateDir: "/tmp/x", Count: 3, NoRestartDelay: true,
		NodePersistence: []Persistence{PersistAlways, PersistEverysec, PersistNone}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	got = cfg.vars()
	if got["persistence"] != `["always","everysec","none"]` || got["restart_delay_seconds"] != "0" {
		t.Errorf("per-node profiles, no delay: persistence %s restart_delay_seconds %s, want [\"always\",\"everysec\",\"none\"] and 0",
			got["persistence"], got["restart_delay_seconds"])
	}
	if cfg.Persistence != "mixed" {
		t.Errorf("persistence of a mixed lab: got %q, want mixed", cfg.Persistence)
	}

	cfg, err = Config{StateDir: "/tmp/x", Etcd: 3, EtcdServer: "/opt/bin/etcd"}.withDefaults()
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
	cfg, err = Config{StateDir: "/tmp/x", Etcd: 3, EtcdServer: "/opt/bin/etcd", EtcdUnsafeNoFsync: true}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.vars()["etcd_unsafe_no_fsync"]; got != "true" {
		t.Errorf("etcd without fsync: etcd_unsafe_no_fsync %q, want true", got)
	}
	if cfg, err = (Config{StateDir: "/tmp/x", TLS: true}).withDefaults(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.vars()["tls_dir"]; got != "/tmp/x/tls" {
		t.Errorf("tls: tls_dir %q, want /tmp/x/tls", got)
	}
}

// TestOpenOldLabFile: a lab.json from before per-node profiles still opens,
// with its one profile on every node.
func TestOpenOldLabFile(t *testing.T) {
	dir := t.TempDir()
	old := `{"count": 3, "base_port": 7100, "persistence": "everysec", "restart_delay": "5s", "nodes": []}`
	if err := os.WriteFile(filepath.Join(dir, labFileName), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := node.FormatPersistenceList(l.NodePersistence()); got != "everysec,everysec,everysec" || l.Persistence() != PersistEverysec {
		t.Errorf("got %s (%s), want everysec on every node", got, l.Persistence())
	}
	c := l.Config()
	if c.RestartDelay != 5*time.Second || c.NoRestartDelay || c.Count != 3 || node.FormatPersistenceList(c.NodePersistence) != "everysec" {
		t.Errorf("config: got %+v, want 3 nodes, 5s restart delay, everysec for all", c)
	}
	// A shared profile survives a new node count.
	c.Count = 5
	if c, err := c.withDefaults(); err != nil || node.FormatPersistenceList(c.NodePersistence) != "everysec,everysec,everysec,everysec,everysec" {
		t.Errorf("5 nodes from a 3-node everysec lab: got %v, %v; want everysec on all 5", c.NodePersistence, err)
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
	cfg := Config{StateDir: dir, Count: 3, BasePort: base}
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

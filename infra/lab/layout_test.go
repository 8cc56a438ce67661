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

	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/internal/redistest"
)

func TestParseRedisConfPersistence(t *testing.T) {
	tests := []struct {
		conf string
		want Persistence
	}{
		{"appendonly yes\nappendfsync always\nsave \"\"\n", PersistAlways},
		{"appendonly yes\nappendfsync everysec\nsave \"\"\n", PersistEverysec},
		{"appendonly no\nappendfsync always\nsave \"\"\n", PersistNone},
		{"# appendonly yes\nappendonly yes\n", PersistEverysec}, // Redis' default fsync
		{"appendonly no\n", "custom"},                           // RDB snapshots still on
	}
	for _, tt := range tests {
		if got := parseRedisConf([]byte(tt.conf)).persistence(); got != tt.want {
			t.Errorf("%q: got %s, want %s", tt.conf, got, tt.want)
		}
	}
}

func TestNodeSpecValidate(t *testing.T) {
	good := NodeSpec{
		ID: 2, StateDir: "/tmp/lab", Port: 7102, RedisPort: 7202, ControlPort: 7302,
		RestartDelay: Duration(time.Second),
		Conf:         []byte("port 7202\ndir /tmp/lab/node2/data\n"), Guard: []byte("#!/bin/bash\n"),
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("good spec: %v", err)
	}
	tests := []struct {
		name   string
		change func(*NodeSpec)
		want   string
	}{
		{"id 0", func(s *NodeSpec) { s.ID = 0 }, "node id 0"},
		{"relative state dir", func(s *NodeSpec) { s.StateDir = "lab" }, "absolute"},
		{"port clash", func(s *NodeSpec) { s.ControlPort = s.Port }, "both"},
		{"conf port differs", func(s *NodeSpec) { s.RedisPort = 7203 }, "rendered redis.conf has port 7202"},
		{"no guard", func(s *NodeSpec) { s.Guard = nil }, "restart guard"},
		{"relative dir", func(s *NodeSpec) { s.Conf = []byte("port 7202\ndir data\n") }, "absolute dir"},
		{"replica port without the rest", func(s *NodeSpec) { s.ReplicaPort = 7402 }, "port, its link port and its redis.conf together"},
		{"replica port clash", func(s *NodeSpec) { withReplica(s); s.ReplicaLinkPort = s.RedisPort }, "both"},
		{"replica conf port differs", func(s *NodeSpec) { withReplica(s); s.ReplicaPort = 7403 }, "replica.conf has port 7402"},
		{"replica in the master's dir", func(s *NodeSpec) {
			withReplica(s)
			s.ReplicaConf = []byte("port 7402\ndir /tmp/lab/node2/data\n")
		}, "dir of its own"},
	}
	r := good
	withReplica(&r)
	if err := r.Validate(); err != nil {
		t.Errorf("good spec with a replica: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good
			tt.change(&s)
			err := s.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// withReplica gives a node spec a valid replica.
func withReplica(s *NodeSpec) {
	s.ReplicaPort, s.ReplicaLinkPort = 7402, 7502
	s.ReplicaConf = []byte("port 7202\ndir /tmp/lab/node2/data\nport 7402\ndir /tmp/lab/node2/replica/data\n")
}

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
		"machines": "false", "etcd_count": "0",
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
	if got["etcd_count"] != "3" || got["etcd_server_path"] != "/opt/bin/etcd" {
		t.Errorf("etcd: etcd_count %q etcd_server_path %q, want 3 and /opt/bin/etcd", got["etcd_count"], got["etcd_server_path"])
	}
}

func TestParsePersistenceList(t *testing.T) {
	tests := []struct {
		in   string
		want string // FormatPersistenceList of the result; "" for an error
	}{
		{"always,always,everysec,everysec,everysec", "always,always,everysec,everysec,everysec"},
		{"none", "none"},
		{"always, everysec", "always,everysec"},
		{"always,,none", ""},
		{"always,sometimes", ""},
		{"", ""},
	}
	for _, tt := range tests {
		got, err := ParsePersistenceList(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("%q: got %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || FormatPersistenceList(got) != tt.want {
			t.Errorf("%q: got %v, %v; want %s", tt.in, got, err, tt.want)
		}
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
	if got := FormatPersistenceList(l.NodePersistence()); got != "everysec,everysec,everysec" || l.Persistence() != PersistEverysec {
		t.Errorf("got %s (%s), want everysec on every node", got, l.Persistence())
	}
	c := l.Config()
	if c.RestartDelay != 5*time.Second || c.NoRestartDelay || c.Count != 3 || FormatPersistenceList(c.NodePersistence) != "everysec" {
		t.Errorf("config: got %+v, want 3 nodes, 5s restart delay, everysec for all", c)
	}
	// A shared profile survives a new node count.
	c.Count = 5
	if c, err := c.withDefaults(); err != nil || FormatPersistenceList(c.NodePersistence) != "everysec,everysec,everysec,everysec,everysec" {
		t.Errorf("5 nodes from a 3-node everysec lab: got %v, %v; want everysec on all 5", c.NodePersistence, err)
	}
}

func TestKillNoteSaysItPlainly(t *testing.T) {
	for _, p := range []Persistence{PersistAlways, PersistEverysec} {
		if n := p.KillNote(); !strings.Contains(n, "kill -9 keeps page-cache writes: always vs everysec indistinguishable; 'none' models key loss") {
			t.Errorf("%s: got %q", p, n)
		}
	}
	if n := PersistNone.KillNote(); !strings.Contains(n, "models key loss") {
		t.Errorf("none: got %q", n)
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
	if err := os.MkdirAll(nodeDir(dir, 2), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := NodeSpec{ID: 2, Port: cfg.BasePort + 2, RedisPort: cfg.BasePort + redisPortOffset + 2, ControlPort: taken}
	if err := atomicfile.WriteJSON(filepath.Join(nodeDir(dir, 2), specFile), spec, 0o644); err != nil {
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

func TestEtcdMemberSpecValidate(t *testing.T) {
	conf := func(listenClient, advertiseClient, listenPeer, advertisePeer int, extra string) []byte {
		return []byte(fmt.Sprintf(`"name": "etcd2"
"data-dir": "/tmp/x/etcd2/data"
"listen-client-urls": "http://127.0.0.1:%d"
"advertise-client-urls": "http://127.0.0.1:%d"
"listen-peer-urls": "http://127.0.0.1:%d"
"initial-advertise-peer-urls": "http://127.0.0.1:%d"
%s`, listenClient, advertiseClient, listenPeer, advertisePeer, extra))
	}
	good := EtcdMemberSpec{ID: 2, StateDir: "/tmp/x", ClientPort: 7702, PeerPort: 7802, EtcdClientPort: 7902, EtcdPeerPort: 8002,
		ControlPort: 8102, EtcdServer: "/usr/local/bin/etcd", Conf: conf(7902, 7702, 8002, 7802, "")}
	tests := []struct {
		name string
		edit func(*EtcdMemberSpec)
		want string // "" for valid
	}{
		{"valid", func(*EtcdMemberSpec) {}, ""},
		{"id 0", func(s *EtcdMemberSpec) { s.ID = 0 }, "etcd member id 0"},
		{"shared port", func(s *EtcdMemberSpec) { s.ControlPort = s.ClientPort }, "are both 7702"},
		{"relative etcd", func(s *EtcdMemberSpec) { s.EtcdServer = "etcd" }, "must be an absolute path"},
		{"listens on the front", func(s *EtcdMemberSpec) { s.Conf = conf(7702, 7702, 8002, 7802, "") }, "listen-client-urls has port 7702, want 7902"},
		{"advertises etcd itself", func(s *EtcdMemberSpec) { s.Conf = conf(7902, 7702, 8002, 8002, "") }, "initial-advertise-peer-urls has port 8002, want 7802"},
		{"fsync off", func(s *EtcdMemberSpec) { s.Conf = conf(7902, 7702, 8002, 7802, `"unsafe-no-fsync": true`) }, "turns fsync off"},
		{"not loopback", func(s *EtcdMemberSpec) {
			s.Conf = []byte(strings.Replace(string(s.Conf), "http://127.0.0.1:7902", "http://10.0.0.1:7902", 1))
		}, "want one http://127.0.0.1:PORT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good
			tt.edit(&s)
			err := s.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
}

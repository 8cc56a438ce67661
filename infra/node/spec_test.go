package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/tlscert"
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

// TestParseRedisConfTLS: a TLS node (the redis-node tls profile) listens
// on tls-port, and the supervisor verifies it with the CA its redis.conf
// names; a plain node gets no TLS configuration.
func TestParseRedisConfTLS(t *testing.T) {
	dir := t.TempDir()
	f, err := tlscert.Write(dir, tlscert.LabHosts, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := parseRedisConf([]byte("port 0\ntls-port 7202\ntls-cert-file " + f.Cert + "\ntls-key-file " + f.Key + "\ntls-ca-cert-file " + f.CA + "\n"))
	if c.listenPort() != 7202 || c.tlsCA != f.CA {
		t.Errorf("TLS conf: listen port %d, CA %q; want 7202 and %s", c.listenPort(), c.tlsCA, f.CA)
	}
	cfg, err := c.tlsConfig()
	if err != nil || cfg == nil || cfg.RootCAs == nil {
		t.Errorf("TLS conf: config %v, %v; want one trusting the CA", cfg, err)
	}
	plain := parseRedisConf([]byte("port 7202\n"))
	if cfg, err := plain.tlsConfig(); plain.listenPort() != 7202 || cfg != nil || err != nil {
		t.Errorf("plain conf: port %d, config %v, %v; want 7202 and no TLS", plain.listenPort(), cfg, err)
	}
	missing := parseRedisConf([]byte("port 0\ntls-port 7202\ntls-ca-cert-file " + dir + "/nope.crt\n"))
	if _, err := missing.tlsConfig(); err == nil || !strings.Contains(err.Error(), "tls-ca-cert-file") {
		t.Errorf("missing CA: got %v, want an error naming tls-ca-cert-file", err)
	}
}

func TestNodeSpecValidate(t *testing.T) {
	good := Spec{
		ID: 2, StateDir: "/tmp/lab", Port: 7102, RedisPort: 7202, ControlPort: 7302,
		RestartDelay: Duration(time.Second),
		Conf:         []byte("port 7202\ndir /tmp/lab/node2/data\n"), Guard: []byte("#!/bin/bash\n"),
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("good spec: %v", err)
	}
	tests := []struct {
		name   string
		change func(*Spec)
		want   string
	}{
		{"id 0", func(s *Spec) { s.ID = 0 }, "node id 0"},
		{"relative state dir", func(s *Spec) { s.StateDir = "lab" }, "absolute"},
		{"port clash", func(s *Spec) { s.ControlPort = s.Port }, "both"},
		{"conf port differs", func(s *Spec) { s.RedisPort = 7203 }, "rendered redis.conf has port 7202"},
		{"no guard", func(s *Spec) { s.Guard = nil }, "restart guard"},
		{"relative dir", func(s *Spec) { s.Conf = []byte("port 7202\ndir data\n") }, "absolute dir"},
		{"replica port without the rest", func(s *Spec) { s.ReplicaPort = 7402 }, "port, its link port and its redis.conf together"},
		{"replica port clash", func(s *Spec) { withReplica(s); s.ReplicaLinkPort = s.RedisPort }, "both"},
		{"replica conf port differs", func(s *Spec) { withReplica(s); s.ReplicaPort = 7403 }, "replica.conf has port 7402"},
		{"TLS conf port differs", func(s *Spec) {
			s.Conf = []byte("port 0\ntls-port 7203\ndir /tmp/lab/node2/data\ntls-ca-cert-file /tmp/lab/tls/ca.crt\n")
		}, "rendered redis.conf has port 7203"},
		{"TLS node with a replica", func(s *Spec) {
			withReplica(s)
			s.Conf = []byte("port 0\ntls-port 7202\ndir /tmp/lab/node2/data\ntls-ca-cert-file /tmp/lab/tls/ca.crt\n")
		}, "a TLS node runs without a replica"},
		{"replica in the master's dir", func(s *Spec) {
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
func withReplica(s *Spec) {
	s.ReplicaPort, s.ReplicaLinkPort = 7402, 7502
	s.ReplicaConf = []byte("port 7202\ndir /tmp/lab/node2/data\nport 7402\ndir /tmp/lab/node2/replica/data\n")
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

func TestMachineSpecValidation(t *testing.T) {
	good := Spec{
		ID: 1, StateDir: "/tmp/lab", Port: 9101, RedisPort: 9201, ControlPort: 9301,
		Conf: []byte("port 9201\ndir /var/lib/redis\n"), Guard: []byte("#!/bin/bash\n"),
		Machine: &MachineSpec{Address: "127.80.35.141", NTPAddress: "127.81.35.141", UserData: []byte("#cloud-config\n")},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("good spec: %v", err)
	}
	for name, mutate := range map[string]func(s *Spec){
		"host loopback":  func(s *Spec) { s.Machine.Address = "127.0.0.1" },
		"not loopback":   func(s *Spec) { s.Machine.Address = "10.0.0.1" },
		"not an address": func(s *Spec) { s.Machine.NTPAddress = "ntp.example" },
		"one address":    func(s *Spec) { s.Machine.NTPAddress = s.Machine.Address },
		"no user data":   func(s *Spec) { s.Machine.UserData = nil },
		"with a replica": func(s *Spec) {
			s.ReplicaPort, s.ReplicaLinkPort, s.ReplicaConf = 9401, 9501, []byte("port 9401\ndir /r\n")
		},
		"IPv6 is not ours": func(s *Spec) { s.Machine.Address = "::1" },
	} {
		s := good
		m := *good.Machine
		s.Machine = &m
		mutate(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, *s.Machine)
		}
	}
}

func TestMachineNetnsSpecValidation(t *testing.T) {
	good := Spec{
		ID: 1, StateDir: "/tmp/lab", Port: 9101, RedisPort: 9201, ControlPort: 9301,
		Conf: []byte("port 9201\ndir /var/lib/redis\n"), Guard: []byte("#!/bin/bash\n"),
		Machine: &MachineSpec{Address: "10.35.141.2", NTPAddress: "10.35.141.1", UserData: []byte("#cloud-config\n"),
			Netns: "redlab-9101", SSHDir: "/tmp/lab/ssh/node1"},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("good spec: %v", err)
	}
	for name, mutate := range map[string]func(s *Spec){
		"loopback in a netns": func(s *Spec) { s.Machine.Address = "127.80.35.141" },
		"two networks":        func(s *Spec) { s.Machine.NTPAddress = "10.35.142.1" },
		"network address":     func(s *Spec) { s.Machine.NTPAddress = "10.35.141.0" },
		"broadcast address":   func(s *Spec) { s.Machine.Address = "10.35.141.3" },
		"long name":           func(s *Spec) { s.Machine.Netns = "redlab-machine-9101" },
		"ssh without netns": func(s *Spec) {
			s.Machine.Netns, s.Machine.Address, s.Machine.NTPAddress = "", "127.80.35.141", "127.81.35.141"
		},
		"relative ssh dir":     func(s *Spec) { s.Machine.SSHDir = "ssh/node1" },
		"one address for both": func(s *Spec) { s.Machine.NTPAddress = s.Machine.Address },
	} {
		s := good
		m := *good.Machine
		s.Machine = &m
		mutate(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, *s.Machine)
		}
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
		{"fsync off, declared", func(s *EtcdMemberSpec) {
			s.Conf, s.UnsafeNoFsync = conf(7902, 7702, 8002, 7802, `"unsafe-no-fsync": true`), true
		}, ""},
		{"declared, fsync on", func(s *EtcdMemberSpec) { s.UnsafeNoFsync = true }, "keeps fsync on"},
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

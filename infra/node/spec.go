package node

import (
	"github.com/redlocklab/redlocklab/infra/lab/profile"

	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
)

// MaxNodes is the largest node ID: the lab spaces its port ranges 100
// apart (see infra/lab).
const MaxNodes = profile.MaxNodes

// Files and directories inside a node's directory (stateDir/nodeN). The
// envs/local root module renders data/, guard/, run/ and redis.log into the
// node configuration, so these names are shared with infra/envs/local.
const (
	confFile          = "redis.conf"
	guardFile         = "restart-guard"
	specFile          = "spec.json"
	statusFile        = "node.json"
	supervisorPIDFile = "supervisor.pid"
	redisPIDFile      = "redis.pid"
	supervisorLogFile = "supervisor.log"
	freshMarker       = "fresh"
	// userDataFile is a machine node's cloud-init user data, machineDir its
	// machine's directory (disk, mounted root, console.log).
	userDataFile = "user-data"
	machineDir   = "machine"
	// replicaConfFile is the replica's rendered redis.conf; its data and
	// log live where that file's dir and logfile say (nodeN/replica/).
	replicaConfFile = "replica.conf"
	replicaPIDFile  = "replica.pid"
)

// nodeDirPrefix and the node's ID name its directory in the state
// directory.
const nodeDirPrefix = "node"

// Dir returns node id's directory in stateDir: stateDir/nodeN.
func Dir(stateDir string, id int) string {
	return filepath.Join(stateDir, nodeDirPrefix+strconv.Itoa(id))
}

// Ports returns the ports node id's spec in stateDir claims (none without
// one): the ports its processes may hold.
func Ports(stateDir string, id int) []int {
	return specPorts(Dir(stateDir, id), func(s Spec) []int {
		return []int{s.Port, s.RedisPort, s.ControlPort, s.ReplicaPort, s.ReplicaLinkPort}
	})
}

// specPorts is ports of the spec in dir; none without one.
func specPorts[S any](dir string, ports func(S) []int) []int {
	var s S
	if readJSONFile(filepath.Join(dir, specFile), &s) != nil {
		return nil
	}
	return ports(s)
}

// Duration is a time.Duration that reads and writes JSON as "1.5s".
type Duration time.Duration

// MarshalJSON renders d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON accepts a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Spec is everything a supervisor needs to run one node. It is written
// to the node directory, so a supervisor can be restarted from disk alone.
type Spec struct {
	ID           int      `json:"id"`
	StateDir     string   `json:"state_dir"`
	Port         int      `json:"port"`
	RedisPort    int      `json:"redis_port"`
	ControlPort  int      `json:"control_port"`
	RestartDelay Duration `json:"restart_delay"`
	// RedisServer is the redis-server executable.
	RedisServer string `json:"redis_server"`
	// Conf and Guard are the rendered redis.conf and restart guard script;
	// they live in their own files, not in spec.json.
	Conf  []byte `json:"-"`
	Guard []byte `json:"-"`
	// ReplicaPort, ReplicaLinkPort and ReplicaConf are set together when
	// the node has an asynchronous replica: a second redis-server on
	// ReplicaPort, run by the same supervisor from ReplicaConf (in its own
	// file), that follows the node's master through a front on
	// ReplicaLinkPort, so that replication can be held back or cut.
	ReplicaPort     int    `json:"replica_port,omitempty"`
	ReplicaLinkPort int    `json:"replica_link_port,omitempty"`
	ReplicaConf     []byte `json:"-"`
	// Machine, when set, makes the node a machine (see machine.go):
	// Conf and Guard then describe what runs inside it, and the supervisor
	// runs neither itself.
	Machine *MachineSpec `json:"machine,omitempty"`
	// PlainDisk keeps the data directory a plain directory instead of the
	// power-loss filesystem (powerfs.go): nothing between redis-server and
	// the disk, and power-loss is refused with ErrPlainDisk.
	PlainDisk bool `json:"plain_disk,omitempty"`
}

// MachineSpec is what a node booted as a machine needs besides the ports.
type MachineSpec struct {
	// Address is the machine's own loopback address: redis-server binds
	// it, on RedisPort.
	Address string `json:"address"`
	// NTPAddress is where the node's supervisor serves the host's time to
	// the machine's chrony.
	NTPAddress string `json:"ntp_address"`
	// UserData is infra/modules/redis-node's cloud_init for the node; it
	// lives in its own file (mode 0600: it embeds the ACL's hashes).
	UserData []byte `json:"-"`
	// Netns, when set, runs the machine in a network namespace of that
	// name, joined to this host by a veth pair (machinenet.go): Address is
	// then the machine's end, NTPAddress the host's, in one /30.
	Netns string `json:"netns,omitempty"`
	// SSHDir, when set, holds the machine's SSH host key and root's
	// authorized_keys (SSHHostKeyFile, SSHAuthorizedKeysFile): its sshd
	// runs with them (machinenet.go). Only with Netns.
	SSHDir string `json:"ssh_dir,omitempty"`
}

// hasReplica reports whether the node runs a replica.
func (s Spec) hasReplica() bool { return s.ReplicaPort != 0 }

func (s Spec) dir() string { return Dir(s.StateDir, s.ID) }

func (s Spec) path(name string) string { return filepath.Join(s.dir(), name) }

// Validate checks the spec's fields, and that the rendered redis.conf agrees
// with the ports it claims.
func (s Spec) Validate() error {
	if s.ID < 1 || s.ID > MaxNodes {
		return fmt.Errorf("node id %d: want 1-%d", s.ID, MaxNodes)
	}
	if !filepath.IsAbs(s.StateDir) {
		return fmt.Errorf("node: state dir %q must be absolute", s.StateDir)
	}
	all := []namedPort{{"port", s.Port}, {"redis port", s.RedisPort}, {"control port", s.ControlPort}}
	if s.ReplicaPort != 0 || s.ReplicaLinkPort != 0 || len(s.ReplicaConf) > 0 {
		if s.ReplicaPort == 0 || s.ReplicaLinkPort == 0 || len(s.ReplicaConf) == 0 {
			return fmt.Errorf("node %d: a replica needs its port, its link port and its redis.conf together", s.ID)
		}
		all = append(all, namedPort{"replica port", s.ReplicaPort}, namedPort{"replica link port", s.ReplicaLinkPort})
	}
	if err := checkSpecPorts(fmt.Sprintf("node %d", s.ID), all); err != nil {
		return err
	}
	if s.RestartDelay < 0 {
		return fmt.Errorf("node %d: negative restart delay", s.ID)
	}
	if len(s.Conf) == 0 || len(s.Guard) == 0 {
		return fmt.Errorf("node %d: redis.conf and restart guard are required", s.ID)
	}
	rc := parseRedisConf(s.Conf)
	if m := s.Machine; m != nil {
		if s.hasReplica() {
			return fmt.Errorf("node %d: a machine runs no replica", s.ID)
		}
		if m.Netns != "" {
			if err := m.validateNetns(s.ID); err != nil {
				return err
			}
		} else if m.SSHDir != "" {
			return fmt.Errorf("node %d: an ssh dir needs a network namespace of the machine's own (sshd binds its address)", s.ID)
		}
		for name, a := range map[string]string{"machine address": m.Address, "NTP address": m.NTPAddress} {
			if m.Netns != "" {
				break
			}
			if ip := net.ParseIP(a); ip == nil || ip.To4() == nil || !ip.IsLoopback() || a == "127.0.0.1" {
				return fmt.Errorf("node %d: %s %q: want an IPv4 loopback address of its own (not 127.0.0.1)", s.ID, name, a)
			}
		}
		if m.SSHDir != "" && !filepath.IsAbs(m.SSHDir) {
			return fmt.Errorf("node %d: ssh dir %q must be absolute", s.ID, m.SSHDir)
		}
		if m.Address == m.NTPAddress {
			return fmt.Errorf("node %d: the machine and its NTP server both on %s", s.ID, m.Address)
		}
		if len(m.UserData) == 0 {
			return fmt.Errorf("node %d: a machine needs its user data", s.ID)
		}
	}
	if rc.listenPort() != s.RedisPort {
		return fmt.Errorf("node %d: rendered redis.conf has port %d, want redis port %d", s.ID, rc.listenPort(), s.RedisPort)
	}
	if rc.tlsPort > 0 && (s.hasReplica() || s.Machine != nil) {
		return fmt.Errorf("node %d: a TLS node runs without a replica, as a process", s.ID)
	}
	if rc.dir == "" || !filepath.IsAbs(rc.dir) {
		return fmt.Errorf("node %d: rendered redis.conf needs an absolute dir, got %q", s.ID, rc.dir)
	}
	if s.hasReplica() {
		rr := parseRedisConf(s.ReplicaConf)
		switch {
		case rr.port != s.ReplicaPort:
			return fmt.Errorf("node %d: rendered replica.conf has port %d, want replica port %d", s.ID, rr.port, s.ReplicaPort)
		case rr.dir == "" || !filepath.IsAbs(rr.dir) || filepath.Clean(rr.dir) == filepath.Clean(rc.dir):
			return fmt.Errorf("node %d: rendered replica.conf needs an absolute dir of its own, got %q", s.ID, rr.dir)
		}
	}
	return nil
}

// namedPort is one port of a spec, named for errors.
type namedPort struct {
	name string
	port int
}

// checkSpecPorts checks that each port is 1-65535 and that no two are the
// same; what ("node 2", "etcd member 1") prefixes the error.
func checkSpecPorts(what string, ports []namedPort) error {
	seen := map[int]string{}
	for _, p := range ports {
		if p.port < 1 || p.port > 65535 {
			return fmt.Errorf("node: %s: %s %d: want 1-65535", what, p.name, p.port)
		}
		if other, dup := seen[p.port]; dup {
			return fmt.Errorf("node: %s: %s and %s are both %d", what, other, p.name, p.port)
		}
		seen[p.port] = p.name
	}
	return nil
}

// hostConf is the node's rendered redis.conf with its paths as this host
// sees them: a machine's data directory is its data volume
// (machineDataDir).
func (s Spec) hostConf() redisConf {
	c := parseRedisConf(s.Conf)
	if s.Machine != nil {
		c.dir = machineDataDir(s, c.dir)
	}
	return c
}

// redisConf is what the supervisor reads back from the rendered redis.conf.
type redisConf struct {
	port        int
	dir         string
	logFile     string // the logfile directive, as written
	appendOnly  bool
	appendFsync string
	save        bool
	// appendDirName and appendFilename locate the multi-part AOF (Redis 7):
	// dir/appendDirName/appendFilename.manifest and the files it names.
	appendDirName  string
	appendFilename string
	// acl: the file defines ACL users, so every client must log in.
	acl bool
	// tlsPort and tlsCA: a TLS node (infra/modules/redis-node's tls
	// profile, port 0) listens on tlsPort, with certificates from tlsCA.
	tlsPort int
	tlsCA   string
}

// listenPort is the port the node listens on: tls-port when plain TCP is
// off.
func (c redisConf) listenPort() int {
	if c.port == 0 && c.tlsPort > 0 {
		return c.tlsPort
	}
	return c.port
}

// tlsConfig is how the supervisor's own clients (readiness, admin, the
// start's wait through the front) speak to a TLS node: verifying it
// against the CA its redis.conf names, the CA the lab's clients trust.
// Nil for a plain node.
func (c redisConf) tlsConfig() (*tls.Config, error) {
	if c.tlsPort == 0 {
		return nil, nil
	}
	cfg, err := nodeaddr.TLSFiles{CA: c.tlsCA}.Config()
	if err != nil {
		return nil, fmt.Errorf("node: the TLS node's CA (tls-ca-cert-file): %w", err)
	}
	return cfg, nil
}

// aofDir is the directory of the multi-part AOF.
func (c redisConf) aofDir() string { return filepath.Join(c.dir, c.appendDirName) }

// aofManifest is the manifest's file name in aofDir.
func (c redisConf) aofManifest() string { return c.appendFilename + ".manifest" }

// persistence names the profile the configuration implements.
func (c redisConf) persistence() Persistence {
	switch {
	case !c.appendOnly && !c.save:
		return PersistNone
	case c.appendOnly && c.appendFsync == "everysec":
		return PersistEverysec
	case c.appendOnly && c.appendFsync == "always":
		return PersistAlways
	case c.appendOnly && c.appendFsync == "no":
		return PersistNoFsync
	}
	return Persistence("custom")
}

func parseRedisConf(b []byte) redisConf {
	// Redis' defaults for what the file does not set.
	c := redisConf{port: 6379, appendFsync: "everysec", save: true,
		appendDirName: "appendonlydir", appendFilename: "appendonly.aof"}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		arg := strings.Trim(f[1], `"'`)
		switch strings.ToLower(f[0]) {
		case "port":
			c.port, _ = strconv.Atoi(arg)
		case "tls-port":
			c.tlsPort, _ = strconv.Atoi(arg)
		case "tls-ca-cert-file":
			c.tlsCA = arg
		case "dir":
			c.dir = arg
		case "logfile":
			c.logFile = arg
		case "appendonly":
			c.appendOnly = arg == "yes"
		case "appendfsync":
			c.appendFsync = arg
		case "save":
			c.save = arg != ""
		case "appenddirname":
			c.appendDirName = arg
		case "appendfilename":
			c.appendFilename = arg
		case "user":
			c.acl = true
		}
	}
	return c
}

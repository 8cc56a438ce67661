package lab

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/internal/atomicfile"
)

// Port offsets from the lab's base port. Node N (from 1) listens on
// base+N (proxy, what clients use), base+redisPortOffset+N (redis-server,
// private) and base+controlPortOffset+N (control endpoint). A node with a
// replica (Config.Replicas) also has the replica's redis-server on
// base+replicaPortOffset+N and the front of its replication link on
// base+replicaLinkOffset+N.
const (
	redisPortOffset   = 100
	controlPortOffset = 200
	replicaPortOffset = 300
	replicaLinkOffset = 400
	// MaxNodes is the largest node count the port layout allows.
	MaxNodes = 99
)

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

// nodeDir returns stateDir/nodeN.
func nodeDir(stateDir string, id int) string {
	return filepath.Join(stateDir, "node"+strconv.Itoa(id))
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

// NodeSpec is everything a supervisor needs to run one node. It is written
// to the node directory, so a supervisor can be restarted from disk alone.
type NodeSpec struct {
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
	// Machine, when set, makes the node a machine (see machinenode.go):
	// Conf and Guard then describe what runs inside it, and the supervisor
	// runs neither itself.
	Machine *MachineSpec `json:"machine,omitempty"`
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
}

// hasReplica reports whether the node runs a replica.
func (s NodeSpec) hasReplica() bool { return s.ReplicaPort != 0 }

func (s NodeSpec) dir() string { return nodeDir(s.StateDir, s.ID) }

func (s NodeSpec) path(name string) string { return filepath.Join(s.dir(), name) }

// Validate checks the spec's fields, and that the rendered redis.conf agrees
// with the ports it claims.
func (s NodeSpec) Validate() error {
	if s.ID < 1 || s.ID > MaxNodes {
		return fmt.Errorf("lab: node id %d: want 1-%d", s.ID, MaxNodes)
	}
	if !filepath.IsAbs(s.StateDir) {
		return fmt.Errorf("lab: state dir %q must be absolute", s.StateDir)
	}
	all := []namedPort{{"port", s.Port}, {"redis port", s.RedisPort}, {"control port", s.ControlPort}}
	if s.ReplicaPort != 0 || s.ReplicaLinkPort != 0 || len(s.ReplicaConf) > 0 {
		if s.ReplicaPort == 0 || s.ReplicaLinkPort == 0 || len(s.ReplicaConf) == 0 {
			return fmt.Errorf("lab: node %d: a replica needs its port, its link port and its redis.conf together", s.ID)
		}
		all = append(all, namedPort{"replica port", s.ReplicaPort}, namedPort{"replica link port", s.ReplicaLinkPort})
	}
	if err := checkSpecPorts(fmt.Sprintf("node %d", s.ID), all); err != nil {
		return err
	}
	if s.RestartDelay < 0 {
		return fmt.Errorf("lab: node %d: negative restart delay", s.ID)
	}
	if len(s.Conf) == 0 || len(s.Guard) == 0 {
		return fmt.Errorf("lab: node %d: redis.conf and restart guard are required", s.ID)
	}
	rc := parseRedisConf(s.Conf)
	if m := s.Machine; m != nil {
		if s.hasReplica() {
			return fmt.Errorf("lab: node %d: a machine runs no replica", s.ID)
		}
		for name, a := range map[string]string{"machine address": m.Address, "NTP address": m.NTPAddress} {
			if ip := net.ParseIP(a); ip == nil || ip.To4() == nil || !ip.IsLoopback() || a == "127.0.0.1" {
				return fmt.Errorf("lab: node %d: %s %q: want an IPv4 loopback address of its own (not 127.0.0.1)", s.ID, name, a)
			}
		}
		if m.Address == m.NTPAddress {
			return fmt.Errorf("lab: node %d: the machine and its NTP server both on %s", s.ID, m.Address)
		}
		if len(m.UserData) == 0 {
			return fmt.Errorf("lab: node %d: a machine needs its user data", s.ID)
		}
	}
	if rc.port != s.RedisPort {
		return fmt.Errorf("lab: node %d: rendered redis.conf has port %d, want redis port %d", s.ID, rc.port, s.RedisPort)
	}
	if rc.dir == "" || !filepath.IsAbs(rc.dir) {
		return fmt.Errorf("lab: node %d: rendered redis.conf needs an absolute dir, got %q", s.ID, rc.dir)
	}
	if s.hasReplica() {
		rr := parseRedisConf(s.ReplicaConf)
		switch {
		case rr.port != s.ReplicaPort:
			return fmt.Errorf("lab: node %d: rendered replica.conf has port %d, want replica port %d", s.ID, rr.port, s.ReplicaPort)
		case rr.dir == "" || !filepath.IsAbs(rr.dir) || filepath.Clean(rr.dir) == filepath.Clean(rc.dir):
			return fmt.Errorf("lab: node %d: rendered replica.conf needs an absolute dir of its own, got %q", s.ID, rr.dir)
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
			return fmt.Errorf("lab: %s: %s %d: want 1-65535", what, p.name, p.port)
		}
		if other, dup := seen[p.port]; dup {
			return fmt.Errorf("lab: %s: %s and %s are both %d", what, other, p.name, p.port)
		}
		seen[p.port] = p.name
	}
	return nil
}

// hostConf is the node's rendered redis.conf with its paths as this host
// sees them: a machine's are below its mounted root.
func (s NodeSpec) hostConf() redisConf {
	c := parseRedisConf(s.Conf)
	if s.Machine != nil {
		c.dir = filepath.Join(machineRoot(s), c.dir)
	}
	return c
}

// redisConf is what the supervisor reads back from the rendered redis.conf.
type redisConf struct {
	port        int
	dir         string
	appendOnly  bool
	appendFsync string
	save        bool
	// appendDirName and appendFilename locate the multi-part AOF (Redis 7):
	// dir/appendDirName/appendFilename.manifest and the files it names.
	appendDirName  string
	appendFilename string
	// acl: the file defines ACL users, so every client must log in.
	acl bool
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
		case "dir":
			c.dir = arg
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

// NodeState is what a node is doing.
type NodeState string

// Node states. A supervisor that is not running reports NodeDown.
const (
	NodeStarting NodeState = "starting" // redis-server started, not answering yet
	NodeWaiting  NodeState = "waiting"  // restart guard is holding the restart delay
	NodeUp       NodeState = "up"
	NodePaused   NodeState = "paused"  // SIGSTOP
	NodeStopped  NodeState = "stopped" // clean stop on request; the supervisor is still there
	NodeDown     NodeState = "down"    // no supervisor
)

// NodeStatus is one node's state as its supervisor sees it.
type NodeStatus struct {
	ID            int         `json:"id"`
	State         NodeState   `json:"state"`
	SupervisorPID int         `json:"supervisor_pid,omitempty"`
	RedisPID      int         `json:"redis_pid,omitempty"`
	Restarts      int         `json:"restarts"`
	Port          int         `json:"port"`
	RedisPort     int         `json:"redis_port"`
	ControlPort   int         `json:"control_port"`
	Persistence   Persistence `json:"persistence"`
	Partitioned   bool        `json:"partitioned,omitempty"`
	Latency       Duration    `json:"latency,omitempty"`
	Jitter        Duration    `json:"jitter,omitempty"`
	LastExit      string      `json:"last_exit,omitempty"`
	Since         time.Time   `json:"since"`
	// Active maps each fault in effect on the node to its ID in faults.jsonl.
	Active map[FaultKind]string `json:"active_faults,omitempty"`
	// AOF is the newest sample of the AOF's incr files, kept for the
	// power-loss model (appendfsync everysec only).
	AOF *AOFSample `json:"aof,omitempty"`
	// Replica describes the node's replica; nil without one.
	Replica *ReplicaStatus `json:"replica,omitempty"`
}

// ReplicaStatus is a replicated node's second redis-server and the
// topology of the pair. The node's front (Port) always leads to the pair's
// master; a failover swaps the roles.
type ReplicaStatus struct {
	Addr string `json:"addr"` // the replica process's redis-server
	Link string `json:"link"` // the front its replication link goes through
	// State is the replica process's: starting, up or down.
	State    NodeState `json:"state"`
	PID      int       `json:"pid,omitempty"`
	Restarts int       `json:"restarts"`
	// Promoted: the replica process is the pair's master (after an odd
	// number of failovers) and the original process, when it runs,
	// follows it.
	Promoted bool `json:"promoted,omitempty"`
	// Synced: the process that follows reports its link to the master up.
	Synced bool `json:"synced"`
	// LinkCut: a failover's lag is holding replication back.
	LinkCut bool `json:"link_cut,omitempty"`
}

// AOFSample is the size of a node's AOF incr files at one instant: a power
// loss one second or more after At keeps at least Bytes of them.
type AOFSample struct {
	At    time.Time `json:"at"`
	Bytes int64     `json:"bytes"`
}

// Addr is the proxied address clients use.
func (s NodeStatus) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func writePID(path string, pid int) error {
	return atomicfile.WriteFile(path, []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

// alive reports whether pid is a live process. A zombie is dead: where PID 1
// does not reap orphans (some containers) an exited daemon stays a zombie.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Field 3 follows the parenthesised command name, which may hold spaces.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z' && b[i+2] != 'X'
	}
	return true
}

// cmdline returns a process's argv.
func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// isSupervisor reports whether pid is `redlab node run` for this node.
func isSupervisor(pid int, stateDir string, id int) bool {
	return isDaemon(pid, "run", stateDir, id)
}

// isDaemon reports whether pid is `redlab node SUB` (run or etcd-run) for
// node or member id of stateDir.
func isDaemon(pid int, sub, stateDir string, id int) bool {
	if !alive(pid) {
		return false
	}
	args := cmdline(pid)
	var run, dirOK, idOK bool
	for i, a := range args {
		next := ""
		if i+1 < len(args) {
			next = args[i+1]
		}
		switch {
		case a == sub && i > 0 && args[i-1] == "node":
			run = true
		case a == "--state-dir" && next == stateDir, a == "--state-dir="+stateDir:
			dirOK = true
		case a == "--id" && next == strconv.Itoa(id), a == "--id="+strconv.Itoa(id):
			idOK = true
		}
	}
	return run && dirOK && idOK
}

// findRedis returns the live redis-server processes whose working
// directory is dataDir: redis-server chdirs to its `dir`, and rewrites its
// argv (process title), so the working directory is what identifies it.
func findRedis(dataDir string) []int {
	return scanProc(func(pid int) bool {
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if err != nil || cwd != dataDir {
			return false
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return strings.HasPrefix(strings.TrimSpace(string(comm)), "redis-server")
	})
}

// findMentioning returns live processes other than this one whose argv
// contains path (the restart guard script while it waits, for instance).
func findMentioning(path string) []int {
	return scanProc(func(pid int) bool {
		for _, a := range cmdline(pid) {
			if strings.Contains(a, path) {
				return true
			}
		}
		return false
	})
}

func scanProc(match func(pid int) bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if match(pid) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

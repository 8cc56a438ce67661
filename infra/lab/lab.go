package lab

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/redlocklab/redlocklab/infra/machine"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/internal/tlscert"
	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
)

// Defaults for Config.
const (
	DefaultStateDir     = ".redlab"
	DefaultCount        = 5
	DefaultBasePort     = 7100
	DefaultRestartDelay = 5 * time.Second
)

// ErrNoLab is returned by Open when the state directory holds no lab.
var ErrNoLab = errors.New("lab: no lab in this state directory (run `redlab lab up`)")

// Config describes a lab. Zero fields take the defaults.
type Config struct {
	StateDir string // default ./.redlab; made absolute
	Count    int    // nodes, default 5
	BasePort int    // default 7100: node N on BasePort+N (see the package doc)
	// Persistence is every node's profile, default always. Set it or
	// NodePersistence.
	Persistence Persistence
	// NodePersistence gives each node its profile, in node order: Count
	// items, or one for every node (see ParsePersistenceList).
	NodePersistence []Persistence
	// RestartDelay is the restart guard's delay after a crash (= the max
	// lock TTL); default 5s.
	RestartDelay time.Duration
	// NoRestartDelay restarts a crashed node at once: the unsafe practice
	// drills compare against. RestartDelay must then be 0.
	NoRestartDelay bool
	// Replicas is 0 (independent nodes, the Redlock practice) or 1: every
	// node gets an asynchronous replica, a second redis-server that follows
	// it through a fault front of its own, so that Failover can promote it
	// behind the node's address. This is the "replicas as nodes" mistake;
	// see Failover.
	Replicas int
	// Machines boots every node as a Debian 12 systemd-nspawn machine
	// (infra/machine) from the cloud-init user data infra/modules/redis-node
	// renders, so that the production unit, chrony and the restart guard
	// run under real systemd (see package node, machine.go). It needs root,
	// systemd-nspawn, nsenter, chronyd and, the first time on a host,
	// debootstrap and Debian's archive; Up refuses without them. Not with
	// Replicas.
	Machines bool
	// SSH, with Machines, gives every machine a network namespace of its
	// own and an sshd that lets the lab's key in as root, and writes a hosts
	// inventory of the machines (see ssh.go): `redlab drill --hosts` and
	// `redlab fault --hosts` then reach them over SSH, as they reach real
	// VMs.
	SSH bool
	// TLS makes every node TLS-only (infra/modules/redis-node's tls
	// profile): Up writes a CA and a node certificate into the state
	// directory (TLSDir; see TLSFiles) and clients address the nodes as
	// rediss:// (NodeList). The fault fronts relay the TLS bytes untouched.
	// Not with Replicas or Machines.
	TLS bool
	// PlainDisks keeps every node's (a machine's too) and etcd member's
	// data directory a plain directory instead of the power-loss
	// filesystem (package node, powerfs.go): nothing between the server
	// and the disk, for measurements and drills that cut no power;
	// power-loss faults are then refused.
	PlainDisks bool
	// Redlab is the redlab binary the provisioners run; default the
	// running executable.
	Redlab string
	// Terraform is the tofu/terraform binary; default FindTerraform.
	Terraform string
	// InfraDir is the repository's infra directory (holding envs/local and
	// modules/redis-node); default FindInfraDir.
	InfraDir string
	// RedisServer is the redis-server binary; default redis-server on PATH.
	RedisServer string
	// Etcd is the number of etcd members next to the Redis nodes: 0 (none,
	// the default), 1, 3 or 5. See layout.go, and package node for the members.
	Etcd int
	// EtcdServer is the etcd binary; default FindEtcd.
	EtcdServer string
	// EtcdUnsafeNoFsync runs every etcd member with unsafe-no-fsync: a
	// declared negative control, in which a power cut of a majority loses
	// writes etcd acknowledged. The members refuse such a configuration
	// unless it is declared here. Needs Etcd > 0.
	EtcdUnsafeNoFsync bool
	// Log receives tofu/terraform's output; nil discards it (it is also
	// kept in the state directory's terraform.log).
	Log io.Writer
	// Owner is the process the lab lives for (a drill: see OwnerOf); nil,
	// the default, is none and the lab stays up until `lab down`. Once
	// the owner is gone the lab takes itself down (package node,
	// owner.go). A later Up sets it again: nil there removes it.
	Owner *Owner
	// Temporary: the state directory is the caller's own temporary one, so
	// Down removes it whole, whatever it holds.
	Temporary bool
}

// Owner names the process a lab lives for, by pid and start time.
type Owner = node.Owner

// OwnerOf is the running process pid as an owner (an error when there is
// no such process).
func OwnerOf(pid int) (Owner, error) { return node.OwnerOf(pid) }

func (c Config) withDefaults() (Config, error) {
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return c, fmt.Errorf("lab: state dir: %w", err)
	}
	c.StateDir = abs
	if c.Count == 0 {
		c.Count = DefaultCount
	}
	if c.BasePort == 0 {
		c.BasePort = DefaultBasePort
	}
	if c.Persistence != "" && len(c.NodePersistence) > 0 && uniform(c.NodePersistence) != c.Persistence {
		return c, fmt.Errorf("lab: persistence %s and per-node persistence %s disagree: set one of them",
			c.Persistence, node.FormatPersistenceList(c.NodePersistence))
	}
	switch {
	case len(c.NodePersistence) == 0:
		p := c.Persistence
		if p == "" {
			p = PersistAlways
		}
		c.NodePersistence = []Persistence{p}
	case len(c.NodePersistence) != 1 && len(c.NodePersistence) != c.Count:
		return c, fmt.Errorf("lab: %d persistence profiles (%s) for %d nodes: want one per node, or one for all",
			len(c.NodePersistence), node.FormatPersistenceList(c.NodePersistence), c.Count)
	}
	if len(c.NodePersistence) == 1 && c.Count > 0 {
		c.NodePersistence = slices.Repeat(c.NodePersistence[:1], c.Count)
	}
	c.NodePersistence = slices.Clone(c.NodePersistence)
	c.Persistence = uniform(c.NodePersistence)
	if c.RestartDelay == 0 && !c.NoRestartDelay {
		c.RestartDelay = DefaultRestartDelay
	}
	return c, c.validate()
}

// uniform returns the profile every node shares, or node.PersistMixed.
func uniform(ps []Persistence) Persistence {
	for _, p := range ps[1:] {
		if p != ps[0] {
			return node.PersistMixed
		}
	}
	return ps[0]
}

func (c Config) validate() error {
	if c.Count < 1 || c.Count > MaxNodes {
		return fmt.Errorf("lab: count %d: want 1-%d", c.Count, MaxNodes)
	}
	if c.Replicas < 0 || c.Replicas > 1 {
		return fmt.Errorf("lab: replicas %d: want 0 (independent nodes) or 1 (one asynchronous replica per node)", c.Replicas)
	}
	if c.Machines && c.Replicas > 0 {
		return fmt.Errorf("lab: machines with replicas: a machine runs one redis-server under systemd; use the process lab for replicas")
	}
	if c.SSH && !c.Machines {
		return fmt.Errorf("lab: ssh without machines: SSH reaches machines of their own network namespace; set Machines too")
	}
	if c.Etcd != 0 && c.Etcd != 1 && c.Etcd != 3 && c.Etcd != 5 {
		return fmt.Errorf("lab: etcd %d: want 0 (none), 1, 3 or 5 members (odd: a majority must exist)", c.Etcd)
	}
	if c.Etcd > 0 && c.Machines {
		return fmt.Errorf("lab: etcd members with machines: etcd members run next to process nodes only")
	}
	if c.EtcdUnsafeNoFsync && c.Etcd == 0 {
		return fmt.Errorf("lab: etcd unsafe-no-fsync without etcd members: give etcd 1, 3 or 5")
	}
	if c.TLS && c.Replicas > 0 {
		return fmt.Errorf("lab: tls with replicas: the replicas' replication links would need TLS too; use independent nodes")
	}
	if c.TLS && c.Machines {
		return fmt.Errorf("lab: tls with machines: the certificates are written for process nodes only")
	}
	if top := c.topOffset(); c.BasePort < 1024 || c.BasePort+top+c.Count > 65535 {
		return fmt.Errorf("lab: base port %d: want >= 1024 with room for %d+%d", c.BasePort, top, c.Count)
	}
	for i, p := range c.NodePersistence {
		if _, err := node.ParsePersistence(string(p)); err != nil {
			return fmt.Errorf("%w (node %d)", err, i+1)
		}
	}
	switch {
	case c.NoRestartDelay && c.RestartDelay != 0:
		return fmt.Errorf("lab: restart delay %v with NoRestartDelay: want 0, or leave NoRestartDelay off", c.RestartDelay)
	case !c.NoRestartDelay && c.RestartDelay < time.Millisecond:
		return fmt.Errorf("lab: restart delay %v: want >= 1ms (it is the max lock TTL), or NoRestartDelay for none", c.RestartDelay)
	case c.RestartDelay > time.Hour:
		return fmt.Errorf("lab: restart delay %v: want at most 1h", c.RestartDelay)
	}
	if !labPath.MatchString(c.StateDir) {
		return fmt.Errorf("lab: state dir %q: the node files live under it, so it may hold only letters, digits, '.', '_', '-' and '/'", c.StateDir)
	}
	return nil
}

// topOffset is the highest port offset the lab uses.
func (c Config) topOffset() int {
	if c.Etcd > 0 {
		return etcdControlOffset
	}
	if c.Replicas > 0 {
		return replicaLinkOffset
	}
	return controlPortOffset
}

// portOffsets are the offsets of every port range the lab uses.
func (c Config) portOffsets() []int {
	if c.Replicas > 0 {
		return []int{0, redisPortOffset, controlPortOffset, replicaPortOffset, replicaLinkOffset}
	}
	return []int{0, redisPortOffset, controlPortOffset}
}

// PortOffsets are the offsets from the base port of every port range a lab
// of this topology uses (each range holds one port per node, from 1).
func PortOffsets(replicas int) []int { return Config{Replicas: replicas}.portOffsets() }

// labPath is what infra/modules/redis-node accepts in a path.
var labPath = regexp.MustCompile(`^/[A-Za-z0-9._/-]+$`)

// vars are the root module's variables (c has its defaults).
func (c Config) vars() map[string]string {
	persistence, _ := json.Marshal(c.NodePersistence)
	v := map[string]string{
		"node_count":            strconv.Itoa(c.Count),
		"base_port":             strconv.Itoa(c.BasePort),
		"persistence":           string(persistence),
		"restart_delay_seconds": strconv.FormatFloat(c.RestartDelay.Seconds(), 'f', -1, 64),
		"state_dir":             c.StateDir,
		"redlab_bin":            c.Redlab,
		"redis_server_path":     c.RedisServer,
		"replicas":              strconv.Itoa(c.Replicas),
		"machines":              strconv.FormatBool(c.Machines),
		"machine_ssh":           strconv.FormatBool(c.SSH),
		"etcd_count":            strconv.Itoa(c.Etcd),
		"plain_disks":           strconv.FormatBool(c.PlainDisks),
		"etcd_unsafe_no_fsync":  strconv.FormatBool(c.EtcdUnsafeNoFsync),
	}
	if c.EtcdServer != "" {
		v["etcd_server_path"] = c.EtcdServer
	}
	if c.TLS {
		v["tls_dir"] = filepath.Join(c.StateDir, TLSDir)
	}
	return v
}

// Node is one lab node as clients and fault injectors see it.
type Node struct {
	ID        int    `json:"id"`
	Addr      string `json:"addr"`       // the proxy: what clients use
	RedisAddr string `json:"redis_addr"` // redis-server itself
	Control   string `json:"control"`    // the supervisor's control endpoint
	// ReplicaAddr and ReplicaLink are the replica's redis-server and the
	// front of its replication link; empty without replicas.
	ReplicaAddr string `json:"replica_addr,omitempty"`
	ReplicaLink string `json:"replica_link,omitempty"`
}

// labFile is stateDir/lab.json.
type labFile struct {
	Count    int `json:"count"`
	BasePort int `json:"base_port"`
	// Persistence is the profile every node shares, or "mixed".
	Persistence Persistence `json:"persistence"`
	// NodePersistence is each node's profile, in node order.
	NodePersistence []Persistence `json:"node_persistence"`
	RestartDelay    Duration      `json:"restart_delay"`
	NoRestartDelay  bool          `json:"no_restart_delay,omitempty"`
	Replicas        int           `json:"replicas,omitempty"`
	Machines        bool          `json:"machines,omitempty"`
	SSH             bool          `json:"ssh,omitempty"`
	TLS             bool          `json:"tls,omitempty"`
	PlainDisks      bool          `json:"plain_disks,omitempty"`
	Redlab          string        `json:"redlab"`
	RedisServer     string        `json:"redis_server"`
	Terraform       string        `json:"terraform"`
	InfraDir        string        `json:"infra_dir"`
	Nodes           []Node        `json:"nodes"`
	Etcd            int           `json:"etcd,omitempty"`
	EtcdServer      string        `json:"etcd_server,omitempty"`
	// EtcdUnsafeNoFsync is Config.EtcdUnsafeNoFsync: the members are a
	// negative control.
	EtcdUnsafeNoFsync bool         `json:"etcd_unsafe_no_fsync,omitempty"`
	EtcdMembers       []EtcdMember `json:"etcd_members,omitempty"`
	// Owner is Config.Owner; the supervisors read it from node.OwnerFile.
	Owner     *Owner `json:"owner,omitempty"`
	Temporary bool   `json:"temporary,omitempty"`
}

const (
	labFileName  = "lab.json"
	workspaceDir = "tf" // the copied root module and its state
	tfLogName    = "terraform.log"
	// credsVarFile, in workspaceDir, holds the credentials as Terraform
	// variables while apply or destroy runs. Hidden, so changedHash skips
	// it.
	credsVarFile = ".credentials.tfvars.json"
	rootModule   = "envs/local"
	nodeModule   = "modules/redis-node"
	etcdModule   = "modules/etcd-member"
)

// Lab is a running lab.
type Lab struct {
	stateDir string
	f        labFile
}

// Open attaches to the lab in stateDir.
func Open(stateDir string) (*Lab, error) {
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	var f labFile
	if err := readJSONFile(filepath.Join(abs, labFileName), &f); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrNoLab, abs)
		}
		return nil, fmt.Errorf("lab: %w", err)
	}
	f.upgrade()
	return &Lab{stateDir: abs, f: f}, nil
}

// upgrade fills in what a lab.json written before profiles were per node
// lacks.
func (f *labFile) upgrade() {
	if len(f.NodePersistence) > 0 {
		return
	}
	p := f.Persistence
	if p == "" {
		p = PersistAlways
	}
	f.NodePersistence = slices.Repeat([]Persistence{p}, max(f.Count, 1))
}

// StateDir is the lab's state directory.
func (l *Lab) StateDir() string { return l.stateDir }

// Nodes returns the lab's nodes, in order.
func (l *Lab) Nodes() []Node { return append([]Node(nil), l.f.Nodes...) }

// Addrs returns the nodes' proxied addresses, in order.
func (l *Lab) Addrs() []string {
	out := make([]string, len(l.f.Nodes))
	for i, n := range l.f.Nodes {
		out[i] = n.Addr
	}
	return out
}

// BasePort is the lab's base port.
func (l *Lab) BasePort() int { return l.f.BasePort }

// Persistence is the profile every node shares, or "mixed" (not a profile:
// see NodePersistence).
func (l *Lab) Persistence() Persistence { return l.f.Persistence }

// NodePersistence is each node's profile, in node order.
func (l *Lab) NodePersistence() []Persistence { return slices.Clone(l.f.NodePersistence) }

// RestartDelay is the configured restart delay (0 with NoRestartDelay).
func (l *Lab) RestartDelay() time.Duration { return time.Duration(l.f.RestartDelay) }

// NoRestartDelay reports whether crashed nodes restart at once.
func (l *Lab) NoRestartDelay() bool { return l.f.NoRestartDelay }

// Replicas is how many asynchronous replicas each node has (0 or 1).
func (l *Lab) Replicas() int { return l.f.Replicas }

// Machines reports whether the nodes are machines (Config.Machines).
func (l *Lab) Machines() bool { return l.f.Machines }

// SSH reports whether the machines run sshd in namespaces of their own
// (Config.SSH).
func (l *Lab) SSH() bool { return l.f.SSH }

// TLS reports whether the nodes are TLS-only (Config.TLS).
func (l *Lab) TLS() bool { return l.f.TLS }

// PlainDisks reports whether the data directories are plain ones
// (Config.PlainDisks): power-loss faults are then refused.
func (l *Lab) PlainDisks() bool { return l.f.PlainDisks }

// EtcdUnsafeNoFsync reports whether the etcd members run without fsync
// (Config.EtcdUnsafeNoFsync), a declared negative control.
func (l *Lab) EtcdUnsafeNoFsync() bool { return l.f.EtcdUnsafeNoFsync }

// NodeList is the nodes' proxied addresses as clients take them:
// rediss:// with TLS (the form REDLAB_NODES carries).
func (l *Lab) NodeList() nodeaddr.List { return nodeaddr.List{Addrs: l.Addrs(), TLS: l.f.TLS} }

// TLSFiles are what a client of a TLS lab verifies the nodes with: the
// lab's CA. Zero without TLS.
func (l *Lab) TLSFiles() nodeaddr.TLSFiles {
	if !l.f.TLS {
		return nodeaddr.TLSFiles{}
	}
	return nodeaddr.TLSFiles{CA: filepath.Join(l.stateDir, TLSDir, tlscert.CAFile)}
}

// TLSConfig is the nodes' TLS client configuration (redlock.WithTLS), nil
// without TLS.
func (l *Lab) TLSConfig() (*tls.Config, error) { return l.NodeList().TLSConfig(l.TLSFiles()) }

// Config returns the configuration the lab was brought up with: a `lab up`
// that changes one setting starts from it, so the others stay as they are.
// Profiles every node shares come back as one item, so a new Count keeps
// them; per-node profiles must be given again for a new Count.
func (l *Lab) Config() Config {
	ps := l.NodePersistence()
	if len(ps) > 0 && uniform(ps) != node.PersistMixed {
		ps = ps[:1]
	}
	return Config{
		StateDir: l.stateDir, Count: l.f.Count, BasePort: l.f.BasePort,
		NodePersistence: ps, RestartDelay: l.RestartDelay(), NoRestartDelay: l.f.NoRestartDelay, Replicas: l.f.Replicas,
		Machines: l.f.Machines, SSH: l.f.SSH, TLS: l.f.TLS, PlainDisks: l.f.PlainDisks, Redlab: l.f.Redlab, Terraform: l.f.Terraform, InfraDir: l.f.InfraDir, RedisServer: l.f.RedisServer,
		Etcd: l.f.Etcd, EtcdServer: l.f.EtcdServer, EtcdUnsafeNoFsync: l.f.EtcdUnsafeNoFsync,
	}
}

func (l *Lab) node(id int) (Node, error) {
	for _, n := range l.f.Nodes {
		if n.ID == id {
			return n, nil
		}
	}
	return Node{}, fmt.Errorf("%w: no node %d (nodes are 1-%d)", ErrInvalid, id, len(l.f.Nodes))
}

// Up creates the lab, or brings an existing one in line with cfg: it makes
// the ACL passwords the first time (see Credentials), copies
// infra/envs/local and infra/modules/redis-node into the state directory
// (so the repository tree stays clean and `down` needs only the state
// directory), runs init when that copy changed, apply with cfg's
// variables, and restarts any node supervisor that is gone (a supervisor
// adopts its node's running redis-server). It returns once every node
// answers through its proxy.
func Up(ctx context.Context, cfg Config) (*Lab, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Redlab == "" {
		if cfg.Redlab, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("lab: redlab binary: %w", err)
		}
	}
	if cfg.RedisServer == "" {
		if cfg.RedisServer, err = exec.LookPath("redis-server"); err != nil {
			return nil, fmt.Errorf("lab: redis-server: %w", err)
		}
	}
	old, _ := Open(cfg.StateDir)
	if cfg.InfraDir == "" && old != nil && fileExists(filepath.Join(old.f.InfraDir, rootModule, "main.tf")) {
		cfg.InfraDir = old.f.InfraDir
	}
	if cfg.InfraDir == "" {
		if cfg.InfraDir, err = FindInfraDir(); err != nil {
			return nil, err
		}
	}
	if cfg.InfraDir, err = filepath.Abs(cfg.InfraDir); err != nil {
		return nil, fmt.Errorf("lab: infra dir: %w", err)
	}
	if cfg.Terraform == "" {
		if cfg.Terraform, err = FindTerraform(filepath.Dir(cfg.InfraDir)); err != nil {
			return nil, err
		}
	}
	if cfg.Machines {
		if err := checkMachineHost(ctx, cfg.Log); err != nil {
			return nil, err
		}
	}
	if cfg.Etcd > 0 && cfg.EtcdServer == "" {
		if cfg.EtcdServer, err = FindEtcd(cfg.Redlab, cfg.InfraDir); err != nil {
			return nil, err
		}
	}
	if err := checkPorts(cfg); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	// Before apply: the supervisors read it as they start.
	creds, err := node.EnsureCredentials(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	if cfg.TLS {
		if err := ensureTLS(cfg.StateDir); err != nil {
			return nil, err
		}
	}
	if cfg.SSH {
		if err := ensureSSH(cfg); err != nil {
			return nil, err
		}
	}
	root, changed, err := stageWorkspace(cfg.InfraDir, filepath.Join(cfg.StateDir, workspaceDir))
	if err != nil {
		return nil, err
	}
	tf, logf, err := newWorkspaceTerraform(cfg.Terraform, root, cfg.StateDir, cfg.Log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	if changed || !fileExists(filepath.Join(root, ".terraform", "modules", "modules.json")) {
		if err := tf.Init(ctx); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(root, ".staged-hash"), []byte(changedHash(root)), 0o644); err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
	}
	// Record the config first: a failed apply still leaves what `down`
	// needs to destroy.
	f := labFile{
		Count: cfg.Count, BasePort: cfg.BasePort, Persistence: cfg.Persistence, NodePersistence: cfg.NodePersistence,
		RestartDelay: Duration(cfg.RestartDelay), NoRestartDelay: cfg.NoRestartDelay, Replicas: cfg.Replicas,
		Machines: cfg.Machines, SSH: cfg.SSH, TLS: cfg.TLS, PlainDisks: cfg.PlainDisks, Redlab: cfg.Redlab, RedisServer: cfg.RedisServer, Terraform: cfg.Terraform, InfraDir: cfg.InfraDir,
		Etcd: cfg.Etcd, EtcdServer: cfg.EtcdServer, EtcdUnsafeNoFsync: cfg.EtcdUnsafeNoFsync, Owner: cfg.Owner, Temporary: cfg.Temporary,
	}
	if old != nil {
		f.Nodes, f.EtcdMembers = old.f.Nodes, old.f.EtcdMembers
	}
	if err := atomicfile.WriteJSON(filepath.Join(cfg.StateDir, labFileName), f, 0o644); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	// Before apply, as the config: a lab whose owner dies during apply
	// still goes down, and `lab list` finds it.
	if err := node.WriteOwner(cfg.StateDir, cfg.Owner); err != nil {
		return nil, err
	}
	if err := register(cfg.StateDir); err != nil {
		return nil, err
	}
	removeVars, err := writeCredentialsVarFile(creds, filepath.Join(cfg.StateDir, workspaceDir, credsVarFile))
	if err != nil {
		return nil, err
	}
	defer removeVars()
	tf.SetVarFiles(filepath.Join(cfg.StateDir, workspaceDir, credsVarFile))
	if err := tf.Apply(ctx, cfg.vars()); err != nil {
		return nil, err
	}
	out, err := tf.Output(ctx)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(out["nodes"], &f.Nodes); err != nil {
		return nil, fmt.Errorf("lab: output nodes: %w", err)
	}
	sort.Slice(f.Nodes, func(i, j int) bool { return f.Nodes[i].ID < f.Nodes[j].ID })
	f.EtcdMembers = nil
	if raw, ok := out["etcd_members"]; ok {
		if err := json.Unmarshal(raw, &f.EtcdMembers); err != nil {
			return nil, fmt.Errorf("lab: output etcd_members: %w", err)
		}
	}
	if err := atomicfile.WriteJSON(filepath.Join(cfg.StateDir, labFileName), f, 0o644); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if err := writeHosts(cfg, f.Nodes); err != nil {
		return nil, err
	}
	// Terraform believes every node exists; a supervisor may have died
	// since (a crash, a reboot). Start it again from its files on disk.
	for _, n := range f.Nodes {
		if err := node.Start(ctx, cfg.Redlab, cfg.StateDir, n.ID); err != nil {
			return nil, err
		}
	}
	// The same for etcd members; then the cluster must be healthy, which
	// it can be only once a majority runs.
	for _, m := range f.EtcdMembers {
		if err := node.StartEtcdMember(ctx, cfg.Redlab, cfg.StateDir, m.ID); err != nil {
			return nil, err
		}
	}
	if err := waitEtcdHealthy(ctx, f.EtcdMembers, cfg.RestartDelay+60*time.Second); err != nil {
		return nil, err
	}
	return &Lab{stateDir: cfg.StateDir, f: f}, nil
}

// Down destroys the lab in cfg.StateDir (only StateDir, Terraform and Log
// are used): its monitoring (StopMonitoring), terraform destroy, whose
// provisioners stop every node, then a sweep of anything left (a node whose
// destroy failed, processes whose supervisor died), then it removes what
// the lab created in the state directory (the credentials file included),
// its registry entry (registry.go), and the directory itself when that
// leaves it empty, or whole when the lab was Temporary. A lab that is
// already down is fine.
func Down(ctx context.Context, cfg Config) error {
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	dir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		unregister(dir)
		return nil
	}
	var errs []error
	// Monitoring first: it watches the nodes, and ends with them.
	if err := StopMonitoring(ctx, dir); err != nil {
		errs = append(errs, err)
	}
	root := filepath.Join(dir, workspaceDir, rootModule)
	var f labFile
	haveLab := readJSONFile(filepath.Join(dir, labFileName), &f) == nil
	f.upgrade()
	// The destroy provisioners run the redlab binary that created the lab;
	// when it is gone (a `go run` build), the sweep below does their work.
	if haveLab && fileExists(filepath.Join(root, "terraform.tfstate")) && executable(f.Redlab) == nil {
		if err := destroy(ctx, cfg, dir, root, f); err != nil {
			errs = append(errs, err)
		}
	}
	// Only what is recognisably the lab's is touched: --state-dir may name a
	// directory that holds other things.
	staged := fileExists(filepath.Join(root, "main.tf"))
	nodes, members := node.Prepared(dir)
	for _, id := range members {
		if err := node.StopEtcdMember(ctx, dir, id, true); err != nil {
			errs = append(errs, err)
		}
	}
	for _, id := range nodes {
		if err := node.Stop(ctx, dir, id, true); err != nil {
			errs = append(errs, err)
		}
	}
	if !haveLab && !staged && len(nodes)+len(members) == 0 {
		// Not a lab directory: leave it as it is, unless it is empty.
		unregister(dir)
		_ = os.Remove(dir)
		return nil
	}
	// A namespace a dead supervisor's sweep missed (its node directory
	// gone) is still found by its name.
	if haveLab && f.SSH {
		for id := 1; id <= f.Count; id++ {
			if err := deleteMachineNet(ctx, f.BasePort+id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	names := []string{labFileName, FaultsFile, tfLogName, node.CredentialsFile, node.OwnerFile, node.OwnerGoneLock, sshDir, HostsFile}
	if staged {
		names = append(names, workspaceDir)
	}
	if len(errs) == 0 {
		// The output of a down its owner's end started: kept when it failed.
		names = append(names, node.OwnerGoneFile)
	}
	for _, name := range names {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			errs = append(errs, fmt.Errorf("lab: %w", err))
		}
	}
	unregister(dir)
	if haveLab && f.Temporary && len(errs) == 0 {
		// The caller's temporary directory: nothing in it is anyone else's.
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("lab: %w", err))
		}
	}
	// Only removed when empty: the directory may hold things we did not make.
	_ = os.Remove(dir)
	return errors.Join(errs...)
}

func destroy(ctx context.Context, cfg Config, dir, root string, f labFile) error {
	bin := cfg.Terraform
	if bin == "" {
		bin = f.Terraform
		if executable(bin) != nil {
			var err error
			if bin, err = FindTerraform(); err != nil {
				return err
			}
		}
	}
	tf, logf, err := newWorkspaceTerraform(bin, root, dir, cfg.Log)
	if err != nil {
		return err
	}
	defer logf.Close()
	// Destroy needs the variables' values, not the right ones: without the
	// file (removed by hand) any valid passwords do.
	creds, err := node.ReadCredentials(filepath.Join(dir, node.CredentialsFile))
	if err != nil {
		if creds, err = node.NewCredentials(); err != nil {
			return err
		}
	}
	varFile := filepath.Join(dir, workspaceDir, credsVarFile)
	removeVars, err := writeCredentialsVarFile(creds, varFile)
	if err != nil {
		return err
	}
	defer removeVars()
	tf.SetVarFiles(varFile)
	c := Config{
		StateDir: dir, Count: f.Count, BasePort: f.BasePort, NodePersistence: f.NodePersistence,
		RestartDelay: time.Duration(f.RestartDelay), NoRestartDelay: f.NoRestartDelay, Replicas: f.Replicas,
		Machines: f.Machines, SSH: f.SSH, Redlab: f.Redlab, RedisServer: f.RedisServer, Etcd: f.Etcd, EtcdServer: f.EtcdServer,
		EtcdUnsafeNoFsync: f.EtcdUnsafeNoFsync,
	}
	return tf.Destroy(ctx, c.vars())
}

// checkMachineHost is Up's check for machines: the host, then the image
// (built once per host, which takes minutes and Debian's archive).
func checkMachineHost(ctx context.Context, logw io.Writer) error {
	if err := node.CheckMachineHost(); err != nil {
		return err
	}
	if _, err := machine.EnsureImage(ctx, machine.ImageConfig{Log: logw}); err != nil {
		return fmt.Errorf("%w: %w", node.ErrMachineHost, err)
	}
	return nil
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

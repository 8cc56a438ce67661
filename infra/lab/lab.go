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

	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/infra/machine"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/internal/tlscert"
	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
)

// Defaults for Config.
const (
	DefaultStateDir     = ".redlab"
	DefaultCount        = profile.DefaultNodes
	DefaultBasePort     = 7100
	DefaultRestartDelay = profile.DefaultRestartDelay
)

// ErrNoLab is returned by Open when the state directory holds no lab.
var ErrNoLab = errors.New("lab: no lab in this state directory (run `redlab lab up`)")

// Config describes a lab: its Profile (the shape, with its rules: package
// profile), and where it lives and what runs it. Zero fields take the
// defaults. It is also what lab.json keeps, so that a later Up, Down and
// Lab.Config start from the same values.
type Config struct {
	// Profile is the lab's shape: nodes, persistence, restart delay,
	// replicas, machines, SSH, TLS, etcd members, the power-loss
	// filesystem. See package profile for each field and Profile.Validate
	// for the rules between them.
	profile.Profile
	StateDir string `json:"-"`         // default ./.redlab; made absolute
	BasePort int    `json:"base_port"` // default 7100: node N on BasePort+N (see the package doc)
	// Redlab is the redlab binary the provisioners run; default the
	// running executable.
	Redlab string `json:"redlab"`
	// Terraform is the tofu/terraform binary; default FindTerraform.
	Terraform string `json:"terraform"`
	// InfraDir is the repository's infra directory (holding envs/local and
	// modules/redis-node); default FindInfraDir.
	InfraDir string `json:"infra_dir"`
	// RedisServer is the redis-server binary; default redis-server on PATH.
	RedisServer string `json:"redis_server"`
	// EtcdServer is the etcd binary; default FindEtcd.
	EtcdServer string `json:"etcd_server,omitempty"`
	// Log receives tofu/terraform's output; nil discards it (it is also
	// kept in the state directory's terraform.log).
	Log io.Writer `json:"-"`
	// Owner is the process the lab lives for (a drill: see OwnerOf); nil,
	// the default, is none and the lab stays up until `lab down`. Once
	// the owner is gone the lab takes itself down (package node,
	// owner.go). A later Up sets it again: nil there removes it.
	Owner *Owner `json:"owner,omitempty"`
	// Temporary: the state directory is the caller's own temporary one, so
	// Down removes it whole, whatever it holds.
	Temporary bool `json:"temporary,omitempty"`
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
	if c.BasePort == 0 {
		c.BasePort = DefaultBasePort
	}
	if c.Profile, err = c.Profile.WithDefaults(); err != nil {
		return c, fmt.Errorf("lab: %w", err)
	}
	return c, c.validate()
}

// validate checks what the profile does not: the ports and the paths.
func (c Config) validate() error {
	if top := c.topOffset(); c.BasePort < 1024 || c.BasePort+top+c.Nodes > 65535 {
		return fmt.Errorf("lab: base port %d: want >= 1024 with room for %d+%d", c.BasePort, top, c.Nodes)
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
func PortOffsets(replicas int) []int {
	return Config{Profile: profile.Profile{Replicas: replicas}}.portOffsets()
}

// labPath is what infra/modules/redis-node accepts in a path.
var labPath = regexp.MustCompile(`^/[A-Za-z0-9._/-]+$`)

// vars are the root module's variables (c has its defaults).
func (c Config) vars() map[string]string {
	persistence, _ := json.Marshal(c.Persistence)
	v := map[string]string{
		"node_count":            strconv.Itoa(c.Nodes),
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
		"plain_disks":           strconv.FormatBool(!c.PowerLoss),
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

// labFile is stateDir/lab.json: the configuration the lab came up with
// (its defaults filled in), and what apply made of it.
type labFile struct {
	Config
	// Endpoints are the nodes' addresses, as the root module's output
	// gives them.
	Endpoints   []Node       `json:"endpoints"`
	EtcdMembers []EtcdMember `json:"etcd_members,omitempty"`
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
	f.StateDir = abs
	return &Lab{stateDir: abs, f: f}, nil
}

// StateDir is the lab's state directory.
func (l *Lab) StateDir() string { return l.stateDir }

// Nodes returns the lab's nodes, in order.
func (l *Lab) Nodes() []Node { return append([]Node(nil), l.f.Endpoints...) }

// Addrs returns the nodes' proxied addresses, in order.
func (l *Lab) Addrs() []string {
	out := make([]string, len(l.f.Endpoints))
	for i, n := range l.f.Endpoints {
		out[i] = n.Addr
	}
	return out
}

// BasePort is the lab's base port.
func (l *Lab) BasePort() int { return l.f.BasePort }

// Profile is the lab's shape, its defaults filled in (every node with its
// own persistence item).
func (l *Lab) Profile() profile.Profile {
	p := l.f.Profile
	p.Persistence = slices.Clone(p.Persistence)
	return p
}

// Persistence is the profile every node shares, or "mixed" (not a profile:
// see NodePersistence).
func (l *Lab) Persistence() Persistence { return l.f.Uniform() }

// NodePersistence is each node's profile, in node order.
func (l *Lab) NodePersistence() []Persistence { return slices.Clone(l.f.Persistence) }

// RestartDelay is the configured restart delay (0 with NoRestartDelay).
func (l *Lab) RestartDelay() time.Duration { return l.f.RestartDelay }

// NoRestartDelay reports whether crashed nodes restart at once.
func (l *Lab) NoRestartDelay() bool { return l.f.NoRestartDelay }

// Replicas is how many asynchronous replicas each node has (0 or 1).
func (l *Lab) Replicas() int { return l.f.Replicas }

// Machines reports whether the nodes are machines (profile.Profile.Machines).
func (l *Lab) Machines() bool { return l.f.Machines }

// SSH reports whether the machines run sshd in namespaces of their own
// (profile.Profile.SSH).
func (l *Lab) SSH() bool { return l.f.SSH }

// TLS reports whether the nodes are TLS-only (profile.Profile.TLS).
func (l *Lab) TLS() bool { return l.f.TLS }

// PowerLossLayer reports whether the data directories are on the power-loss
// filesystem (profile.Profile.PowerLoss); without it power-loss faults
// are refused.
func (l *Lab) PowerLossLayer() bool { return l.f.PowerLoss }

// EtcdUnsafeNoFsync reports whether the etcd members run without fsync
// (profile.Profile.EtcdUnsafeNoFsync), a declared negative control.
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
// Profiles every node shares come back as one item, so a new node count
// keeps them; per-node profiles must be given again for a new count.
func (l *Lab) Config() Config {
	c := l.f.Config
	c.StateDir = l.stateDir
	c.Profile = l.Profile()
	if u := c.Uniform(); u != profile.PersistMixed && len(c.Persistence) > 0 {
		c.Persistence = []Persistence{u}
	}
	return c
}

func (l *Lab) node(id int) (Node, error) {
	for _, n := range l.f.Endpoints {
		if n.ID == id {
			return n, nil
		}
	}
	return Node{}, fmt.Errorf("%w: no node %d (nodes are 1-%d)", ErrInvalid, id, len(l.f.Endpoints))
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
	f := labFile{Config: cfg}
	if old != nil {
		f.Endpoints, f.EtcdMembers = old.f.Endpoints, old.f.EtcdMembers
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
	if err := json.Unmarshal(out["nodes"], &f.Endpoints); err != nil {
		return nil, fmt.Errorf("lab: output nodes: %w", err)
	}
	sort.Slice(f.Endpoints, func(i, j int) bool { return f.Endpoints[i].ID < f.Endpoints[j].ID })
	f.EtcdMembers = nil
	if raw, ok := out["etcd_members"]; ok {
		if err := json.Unmarshal(raw, &f.EtcdMembers); err != nil {
			return nil, fmt.Errorf("lab: output etcd_members: %w", err)
		}
	}
	if err := atomicfile.WriteJSON(filepath.Join(cfg.StateDir, labFileName), f, 0o644); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if err := writeHosts(cfg, f.Endpoints); err != nil {
		return nil, err
	}
	// Terraform believes every node exists; a supervisor may have died
	// since (a crash, a reboot). Start it again from its files on disk.
	for _, n := range f.Endpoints {
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
	f.StateDir = dir
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
		for id := 1; id <= f.Nodes; id++ {
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
	c := f.Config
	c.StateDir = dir
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

package node

import (
	"github.com/redlocklab/redlocklab/infra/lab/profile"

	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/redlocklab/redlocklab/internal/proc"
)

// MaxEtcdMembers is the largest etcd cluster a lab runs.
const MaxEtcdMembers = profile.MaxEtcdMembers

// Files in an etcd member's directory, stateDir/etcdM: these, spec.json,
// data/, supervisor.log.
const (
	etcdConfFile  = "etcd.yml"
	etcdStatus    = "member.json"
	etcdPIDFile   = "etcd.pid"
	etcdLogFile   = "etcd.log"
	etcdDirPrefix = "etcd"
)

func etcdDir(stateDir string, id int) string {
	return filepath.Join(stateDir, etcdDirPrefix+strconv.Itoa(id))
}

// EtcdMemberPorts is Ports for etcd member id.
func EtcdMemberPorts(stateDir string, id int) []int {
	return specPorts(etcdDir(stateDir, id), func(s EtcdMemberSpec) []int {
		return []int{s.ClientPort, s.PeerPort, s.EtcdClientPort, s.EtcdPeerPort, s.ControlPort}
	})
}

// EtcdMemberSpec is everything a member's supervisor needs; it is written to
// the member's directory, so a supervisor can be restarted from disk alone.
type EtcdMemberSpec struct {
	ID             int      `json:"id"`
	StateDir       string   `json:"state_dir"`
	ClientPort     int      `json:"client_port"`      // the client front
	PeerPort       int      `json:"peer_port"`        // the peer front
	EtcdClientPort int      `json:"etcd_client_port"` // etcd's listen-client-urls
	EtcdPeerPort   int      `json:"etcd_peer_port"`   // etcd's listen-peer-urls
	ControlPort    int      `json:"control_port"`
	RestartDelay   Duration `json:"restart_delay"`
	EtcdServer     string   `json:"etcd_server"`
	// Conf is the rendered etcd.yml; it lives in its own file.
	Conf []byte `json:"-"`
	// PlainDisk: as Spec's, for the member's data directory.
	PlainDisk bool `json:"plain_disk,omitempty"`
	// UnsafeNoFsync declares the member a negative control whose etcd.yml
	// turns fsync off (unsafe-no-fsync: true): a power cut then loses what
	// etcd acknowledged. Validate refuses such a file without it, and it
	// without such a file.
	UnsafeNoFsync bool `json:"unsafe_no_fsync,omitempty"`
}

func (s EtcdMemberSpec) dir() string { return etcdDir(s.StateDir, s.ID) }

func (s EtcdMemberSpec) path(name string) string { return filepath.Join(s.dir(), name) }

// etcdConf is what the lab reads back from a rendered etcd.yml.
type etcdConf struct {
	Name                string `yaml:"name"`
	DataDir             string `yaml:"data-dir"`
	ListenClientURLs    string `yaml:"listen-client-urls"`
	AdvertiseClientURLs string `yaml:"advertise-client-urls"`
	ListenPeerURLs      string `yaml:"listen-peer-urls"`
	AdvertisePeerURLs   string `yaml:"initial-advertise-peer-urls"`
	UnsafeNoFsync       bool   `yaml:"unsafe-no-fsync"`
}

func parseEtcdConf(b []byte) (etcdConf, error) {
	var c etcdConf
	if err := yaml.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("node: etcd.yml: %w", err)
	}
	return c, nil
}

// urlPort returns the port of a single http://127.0.0.1:PORT URL.
func urlPort(s string) (int, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" {
		return 0, fmt.Errorf("%q: want one http://127.0.0.1:PORT", s)
	}
	return strconv.Atoi(u.Port())
}

// Validate checks the spec's fields, and that the rendered etcd.yml listens
// and advertises where the spec says, keeps fsync on (unless the spec
// declares UnsafeNoFsync) and has its data dir.
func (s EtcdMemberSpec) Validate() error {
	if s.ID < 1 || s.ID > MaxEtcdMembers {
		return fmt.Errorf("node: etcd member id %d: want 1-%d", s.ID, MaxEtcdMembers)
	}
	if !filepath.IsAbs(s.StateDir) {
		return fmt.Errorf("node: state dir %q must be absolute", s.StateDir)
	}
	if err := checkSpecPorts(fmt.Sprintf("etcd member %d", s.ID), []namedPort{
		{"client port", s.ClientPort}, {"peer port", s.PeerPort}, {"etcd client port", s.EtcdClientPort},
		{"etcd peer port", s.EtcdPeerPort}, {"control port", s.ControlPort},
	}); err != nil {
		return err
	}
	if s.RestartDelay < 0 {
		return fmt.Errorf("node: etcd member %d: negative restart delay", s.ID)
	}
	if s.EtcdServer == "" || !filepath.IsAbs(s.EtcdServer) {
		return fmt.Errorf("node: etcd member %d: etcd server %q must be an absolute path", s.ID, s.EtcdServer)
	}
	c, err := parseEtcdConf(s.Conf)
	if err != nil {
		return fmt.Errorf("node: etcd member %d: %w", s.ID, err)
	}
	for _, want := range []struct {
		key, val string
		port     int
	}{
		{"listen-client-urls", c.ListenClientURLs, s.EtcdClientPort},
		{"advertise-client-urls", c.AdvertiseClientURLs, s.ClientPort},
		{"listen-peer-urls", c.ListenPeerURLs, s.EtcdPeerPort},
		{"initial-advertise-peer-urls", c.AdvertisePeerURLs, s.PeerPort},
	} {
		got, err := urlPort(want.val)
		if err != nil {
			return fmt.Errorf("node: etcd member %d: rendered %s %w", s.ID, want.key, err)
		}
		if got != want.port {
			return fmt.Errorf("node: etcd member %d: rendered %s has port %d, want %d", s.ID, want.key, got, want.port)
		}
	}
	if c.DataDir == "" || !filepath.IsAbs(c.DataDir) {
		return fmt.Errorf("node: etcd member %d: rendered etcd.yml needs an absolute data-dir, got %q", s.ID, c.DataDir)
	}
	switch {
	case c.UnsafeNoFsync && !s.UnsafeNoFsync:
		return fmt.Errorf("node: etcd member %d: rendered etcd.yml turns fsync off (unsafe-no-fsync) and the spec does not declare the negative control (unsafe_no_fsync)", s.ID)
	case s.UnsafeNoFsync && !c.UnsafeNoFsync:
		return fmt.Errorf("node: etcd member %d: the spec declares unsafe_no_fsync and the rendered etcd.yml keeps fsync on", s.ID)
	}
	return nil
}

// PrepareEtcdMember writes the member's spec and rendered etcd.yml into
// stateDir/etcdM and creates its data directory.
func PrepareEtcdMember(spec EtcdMemberSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	c, _ := parseEtcdConf(spec.Conf)
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return fmt.Errorf("node: etcd member %d: %w", spec.ID, err)
	}
	return etcdDaemon(spec.StateDir, spec.ID).writeSpec(spec, daemonFile{etcdConfFile, &spec.Conf, 0o644})
}

// LoadEtcdMemberSpec reads what PrepareEtcdMember wrote.
func LoadEtcdMemberSpec(stateDir string, id int) (EtcdMemberSpec, error) {
	var spec EtcdMemberSpec
	if err := etcdDaemon(stateDir, id).readSpec(&spec, func() []daemonFile {
		return []daemonFile{{name: etcdConfFile, b: &spec.Conf}}
	}); err != nil {
		return spec, err
	}
	return spec, spec.Validate()
}

// StartEtcdMember starts the supervisor of a prepared member detached from
// the caller (its own session, output to stateDir/etcdM/supervisor.log) by
// running `redlab node etcd-run`, and returns once etcd listens on its
// client port through the front. It does not wait for the member to be
// healthy: that takes a majority of the cluster, whose other members may
// not have started yet (Up waits for the cluster). A supervisor already
// running for the member is left alone.
func StartEtcdMember(ctx context.Context, redlab, stateDir string, id int) error {
	spec, err := LoadEtcdMemberSpec(stateDir, id)
	if err != nil {
		return err
	}
	d := etcdDaemon(spec.StateDir, id)
	pid, err := d.launch(redlab)
	if err != nil || pid == 0 {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(spec.RestartDelay)+30*time.Second)
	defer cancel()
	front := "127.0.0.1:" + strconv.Itoa(spec.ClientPort)
	return awaitStarted(ctx, d, pid, func(st EtcdMemberStatus) error {
		if st.EtcdPID == 0 {
			return fmt.Errorf("supervisor reports %q", st.State)
		}
		conn, err := net.DialTimeout("tcp", front, 300*time.Millisecond)
		if err == nil {
			conn.Close()
		}
		return err
	}, func(why error) error {
		return fmt.Errorf("node: etcd member %d does not listen on %s: %w (last error: %v)", id, front, ctx.Err(), why)
	})
}

// StopEtcdMember stops member id: its supervisor (SIGTERM; it stops etcd
// cleanly), then any etcd process of the member a dead supervisor left
// (found by its configuration file on its command line). With purge it then
// removes stateDir/etcdM. Stopping a member that is not running succeeds.
func StopEtcdMember(ctx context.Context, stateDir string, id int, purge bool) error {
	d := etcdDaemon(stateDir, id)
	return d.stop(ctx, stopTimeout+5*time.Second, purge, func(context.Context) []error {
		for _, pid := range findMentioning(d.path(etcdConfFile)) {
			signalGroup(pid, syscall.SIGKILL)
			proc.WaitGone(context.Background(), pid, 5*time.Second)
		}
		return nil
	}, etcdPIDFile)
}

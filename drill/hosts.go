// Drills on real hosts: the nodes are the hosts of an inventory, reached
// over SSH (infra/remote), the faults those of infra/hostfault.

package drill

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/hostfault"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/infra/remote"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
)

// TransportSSH is Result.Transport for a drill run on real hosts.
const TransportSSH = "ssh"

// HostsConfig runs drills on the hosts of an inventory instead of a lab.
type HostsConfig struct {
	Inventory *hosts.Inventory
	Remote    remote.Config
	// Username and Password are the Redis user the lock clients log in as
	// (the redlock ACL user of infra/modules/redis-node).
	Username, Password string
	// DeadMan bounds the switch of faults without a length.
	DeadMan time.Duration
}

// site is where a drill's nodes are: a lab, or hosts over SSH.
type site interface {
	targets
	Addrs() []string
	Credentials() (lab.Credentials, error)
	StateDir() string
	Config() lab.Config
	EtcdEndpoints() []string
	Faults() ([]lab.Fault, error)
	// NodeList, TLSFiles and TLSConfig say how clients reach the nodes:
	// rediss:// and the CA on a TLS lab.
	NodeList() nodeaddr.List
	TLSFiles() nodeaddr.TLSFiles
	TLSConfig() (*tls.Config, error)
}

var (
	_ site = (*lab.Lab)(nil)
	_ site = (*hostSite)(nil)
)

// errNotOnHosts is a fault or setting a drill on hosts cannot have.
var errNotOnHosts = errors.New("drill: not on real hosts")

// CheckHosts returns why spec cannot run on the hosts of inv, if it cannot:
// the nodes must be the inventory's hosts, and the lab-only parts (etcd
// members, replicas, process-scope pauses, modelled clocks) are refused.
// A weaker profile than production needs a drill environment.
func CheckHosts(spec *Spec, inv *hosts.Inventory) error {
	spec, _ = forHosts(spec)
	switch {
	case spec.Lab.Nodes != len(inv.Hosts):
		return fmt.Errorf("%w: %s wants %d nodes, the inventory has %d hosts", errNotOnHosts, spec.Name, spec.Lab.Nodes, len(inv.Hosts))
	case spec.Lab.Etcd > 0:
		return fmt.Errorf("%w: %s has faults on etcd members, which a hosts inventory does not list", errNotOnHosts, spec.Name)
	case spec.Lab.Replicas > 0:
		return fmt.Errorf("%w: %s needs replicas behind the nodes' addresses (the lab's failover)", errNotOnHosts, spec.Name)
	case len(spec.ProcessGuards()) > 0:
		return fmt.Errorf("%w: %s pauses serve processes (scope process), which run in the lab", errNotOnHosts, spec.Name)
	}
	for _, f := range spec.Faults {
		if f.Kind == fault.ClientPause {
			continue // in the drill's own process
		}
		if err := fault.Validate(f.Kind, f.Params, fault.SSHHost, false); err != nil {
			return fmt.Errorf("%w: %s:%d: %w", errNotOnHosts, spec.Name, f.Line, err)
		}
	}
	if len(weakenings(spec)) > 0 {
		return inv.CheckDrillEnvironment()
	}
	return nil
}

// forHosts is spec as it runs on hosts, whose inventory lists Redis nodes
// only: without its etcd members (Spec.WithoutEtcd), or unchanged, for
// CheckHosts to refuse, when it is about etcd.
func forHosts(spec *Spec) (*Spec, []inventory.Guard) {
	out, leftOut, _ := spec.WithoutEtcd()
	return out, leftOut
}

// weakenings returns, per node (from 1), the infra/hostfault weakenings
// that give it the spec's profile instead of production's.
func weakenings(spec *Spec) map[int][]string { return weakeningsOf(spec.Lab) }

// weakeningsOf returns, per node (from 1), the infra/hostfault weakenings
// that give it the profile p instead of production's.
func weakeningsOf(p profile.Profile) map[int][]string {
	out := map[int][]string{}
	for i := range p.Nodes {
		var w []string
		if i < len(p.Persistence) {
			switch p.Persistence[i] {
			case lab.PersistEverysec:
				w = append(w, "everysec")
			case lab.PersistNone:
				w = append(w, "no-persistence")
			}
		}
		if p.RestartDelay == 0 {
			w = append(w, "no-delay")
		}
		if len(w) > 0 {
			out[i+1] = w
		}
	}
	return out
}

// hostSite is a drill's nodes on real hosts, an SSH session's
// (hostfault.Session): its faults go through the session, which records
// them in the site's faults.jsonl, as the lab's supervisors record theirs.
type hostSite struct {
	cfg      HostsConfig
	hosts    *hostfault.Session
	stateDir string
}

func openHostSite(ctx context.Context, cfg HostsConfig, stateDir string, logf func(string, ...any)) (*hostSite, error) {
	s := &hostSite{cfg: cfg, stateDir: stateDir}
	var err error
	s.hosts, err = hostfault.Dial(ctx, cfg.Inventory, nil, hostfault.SessionOptions{
		Options: hostfault.Options{Horizon: cfg.DeadMan}, Remote: cfg.Remote,
		FaultLog: s.faultsPath(), Username: cfg.Username, Password: cfg.Password, Log: logf,
	})
	return s, err
}

func (s *hostSite) Injector(id int) fault.Injector { return s.hosts.Host(id) }

// EtcdInjector refuses: a hosts inventory lists Redis nodes only
// (CheckHosts).
func (s *hostSite) EtcdInjector(int) fault.Injector {
	return fault.InjectorFunc(func(_ context.Context, kind fault.Kind, _ fault.Params) (fault.Result, error) {
		return fault.Result{Kind: kind}, fmt.Errorf("%w: no etcd members", errNotOnHosts)
	})
}

func (s *hostSite) Addrs() []string { return s.cfg.Inventory.RedisAddresses() }

func (s *hostSite) Credentials() (lab.Credentials, error) {
	var c lab.Credentials
	c.Redlock.Name, c.Redlock.Password = s.cfg.Username, s.cfg.Password
	return c, nil
}

func (s *hostSite) StateDir() string        { return s.stateDir }
func (s *hostSite) Config() lab.Config      { return lab.Config{} }
func (s *hostSite) EtcdEndpoints() []string { return nil }

// Hosts are reached in plain TCP: the inventory names no TLS (yet).
func (s *hostSite) NodeList() nodeaddr.List         { return nodeaddr.List{Addrs: s.Addrs()} }
func (s *hostSite) TLSFiles() nodeaddr.TLSFiles     { return nodeaddr.TLSFiles{} }
func (s *hostSite) TLSConfig() (*tls.Config, error) { return nil, nil }

func (s *hostSite) faultsPath() string { return filepath.Join(s.stateDir, faultlog.FileName) }

func (s *hostSite) Faults() ([]lab.Fault, error) {
	fs, err := faultlog.Read(s.faultsPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return fs, err
}

// healAllHosts heals everything redlab may have left on every host.
func (s *hostSite) healAllHosts(ctx context.Context, logf func(string, ...any)) error {
	outs, err := s.hosts.HealAll(ctx)
	for _, n := range s.hosts.Hosts() {
		if out := outs[n]; out != "" {
			logf("host %d: %s", n, out)
		}
	}
	return err
}

// runOnHosts is Run on real hosts: heal what an earlier run left, weaken
// the nodes to the spec's profile (a drill environment only), run the load
// and the faults, heal, restore the production profile.
func runOnHosts(ctx context.Context, spec *Spec, opts Options, seed uint64, dir, state string, logf func(string, ...any)) (*Result, error) {
	cfg := *opts.Hosts
	if err := CheckHosts(spec, cfg.Inventory); err != nil {
		return nil, err
	}
	spec, leftOut := forHosts(spec)
	if len(leftOut) > 0 {
		logf("guards %s left out: they lock on etcd members, which the hosts inventory does not list (they run in the lab)", inventory.JoinGuards(leftOut))
	}
	s, err := openHostSite(ctx, cfg, state, logf)
	if err != nil {
		return nil, fmt.Errorf("drill %s: %w", spec.Name, err)
	}
	defer s.hosts.Close()
	// After Jepsen: heal at setup as at the end, whatever a crashed run left.
	if err := s.healAllHosts(ctx, logf); err != nil {
		return nil, fmt.Errorf("drill %s: heal before the run: %w", spec.Name, err)
	}
	weak := weakenings(spec)
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		for id := range weak {
			if err := s.hosts.Restore(rctx, id); err != nil {
				logf("node %d: restore: %v", id, err)
			}
		}
	}()
	for id, names := range weak {
		logf("node %d: weaken: %s", id, strings.Join(names, ", "))
		if err := s.hosts.Weaken(ctx, id, names...); err != nil {
			return nil, fmt.Errorf("drill %s: node %d: %w", spec.Name, id, err)
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := s.hosts.WaitAnswering(wctx); err != nil {
		return nil, fmt.Errorf("drill %s: %w", spec.Name, err)
	}
	logf("hosts: %d nodes over SSH (%s)", len(s.hosts.Hosts()), strings.Join(s.Addrs(), ", "))
	res, err := runLoad(ctx, spec, seed, dir, s, 0, logf)
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	herr := errors.Join(s.hosts.Heal(hctx), s.healAllHosts(hctx, logf))
	if ferr := copyFile(s.faultsPath(), filepath.Join(dir, faultlog.FileName)); ferr != nil && !errors.Is(ferr, os.ErrNotExist) && err == nil {
		err = ferr
	}
	if err != nil {
		return nil, err
	}
	if herr != nil {
		return nil, fmt.Errorf("drill %s: heal after the run: %w", spec.Name, herr)
	}
	res.Transport = TransportSSH
	for _, g := range leftOut {
		res.LeftOut = append(res.LeftOut, string(g))
	}
	if err := writeJSON(filepath.Join(dir, ResultFile), res); err != nil {
		return nil, err
	}
	if err := WriteTimeline(dir); err != nil {
		return nil, err
	}
	verdict := "PASS"
	if !res.Passed {
		verdict = "FAIL"
	}
	logf("%s (%s, over SSH)", verdict, dir)
	return res, nil
}

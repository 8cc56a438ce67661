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
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/hostfault"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
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
	nodeFaults
	etcdFaults
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

// forHosts is spec as it runs on hosts: a spec whose etcd members only
// carry guards (the seed's alternative, compared under a fault of the Redis
// nodes) runs without them and their guards, which are left out, since a
// hosts inventory lists Redis nodes only; a spec with faults on etcd
// members is returned unchanged, for CheckHosts to refuse.
func forHosts(spec *Spec) (*Spec, []inventory.Guard) {
	if spec.Lab.Etcd == 0 || slices.ContainsFunc(spec.Faults, func(f Fault) bool { return len(f.Etcd) > 0 }) {
		return spec, nil
	}
	s := *spec
	s.Lab.Etcd = 0
	s.Workload.Guards = nil
	s.Expect = map[inventory.Guard][]Expectation{}
	var out []inventory.Guard
	for _, g := range spec.Workload.Guards {
		if g.NeedsEtcd() {
			out = append(out, g)
			continue
		}
		s.Workload.Guards = append(s.Workload.Guards, g)
		if e, ok := spec.Expect[g]; ok {
			s.Expect[g] = e
		}
	}
	return &s, out
}

// weakenings returns, per node (from 1), the infra/hostfault weakenings
// that give it the spec's profile instead of production's.
func weakenings(spec *Spec) map[int][]string {
	out := map[int][]string{}
	for i := range spec.Lab.Nodes {
		var w []string
		if i < len(spec.Lab.Persistence) {
			switch spec.Lab.Persistence[i] {
			case lab.PersistEverysec:
				w = append(w, "everysec")
			case lab.PersistNone:
				w = append(w, "no-persistence")
			}
		}
		if spec.Lab.RestartDelay == 0 {
			w = append(w, "no-delay")
		}
		if len(w) > 0 {
			out[i+1] = w
		}
	}
	return out
}

// hostSite is a drill's nodes on real hosts. Its faults are recorded in
// its own faults.jsonl, as the lab's supervisors record theirs: a crash
// ends when the node answers again, a timed fault when it is healed.
type hostSite struct {
	cfg      HostsConfig
	clients  []*remote.Client
	stateDir string
	log      func(string, ...any)

	// ctx ends the site's own goroutines (timed heals, answer watches).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	active map[int][]hostfault.Fault // per node: faults a heal ends
}

func openHostSite(ctx context.Context, cfg HostsConfig, stateDir string, logf func(string, ...any)) (*hostSite, error) {
	s := &hostSite{cfg: cfg, stateDir: stateDir, log: logf, active: map[int][]hostfault.Fault{}}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.clients = make([]*remote.Client, len(cfg.Inventory.Hosts))
	err := onEach(seq(len(s.clients)), func(id int) string { return "host " + strconv.Itoa(id) }, func(id int) error {
		c, err := remote.Dial(ctx, cfg.Inventory.Hosts[id-1], cfg.Remote)
		s.clients[id-1] = c
		return err
	})
	if err != nil {
		s.close(ctx)
		return nil, err
	}
	return s, nil
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// healAllHosts heals everything redlab may have left on every host.
func (s *hostSite) healAllHosts(ctx context.Context) error {
	return onEach(seq(len(s.clients)), func(id int) string { return "host " + strconv.Itoa(id) }, func(id int) error {
		out, err := hostfault.HealAll(ctx, s.clients[id-1], s.clients[id-1].Host())
		if out != "" {
			s.log("host %d: %s", id, out)
		}
		return err
	})
}

// close stops the site's goroutines (a timed heal still pending heals at
// once) and ends the connections.
func (s *hostSite) close(ctx context.Context) {
	s.cancel()
	s.wg.Wait()
	for _, c := range s.clients {
		if c != nil {
			c.Close()
		}
	}
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

func (s *hostSite) record(f hostfault.Fault, node int, phase faultlog.Phase, at time.Time) {
	if err := faultlog.Append(s.faultsPath(), faultlog.Event{ID: f.ID, Node: node, Kind: faultlog.Kind(f.Kind), Phase: phase, Time: at.UTC()}); err != nil {
		s.log("node %d: record %s: %v", node, f.Kind, err)
	}
}

func (s *hostSite) client(id int) (*remote.Client, error) {
	if id < 1 || id > len(s.clients) {
		return nil, fmt.Errorf("%w: no host %d (hosts are 1-%d)", lab.ErrInvalid, id, len(s.clients))
	}
	return s.clients[id-1], nil
}

// inject starts kind on node id and records its start.
func (s *hostSite) inject(ctx context.Context, id int, kind string, p hostfault.Params) (hostfault.Fault, error) {
	c, err := s.client(id)
	if err != nil {
		return hostfault.Fault{}, err
	}
	at := time.Now()
	f, err := hostfault.Inject(ctx, c, hostfault.Fault{Kind: kind, Host: c.Host()}, p, hostfault.Options{Horizon: s.cfg.DeadMan})
	if err != nil {
		return f, err
	}
	s.record(f, id, faultlog.Start, at)
	return f, nil
}

// endWhenAnswering records f's end when node id answers PING again.
func (s *hostSite) endWhenAnswering(id int, f hostfault.Fault) {
	s.wg.Go(func() {
		rc := redis.NewClient(&redis.Options{Addr: s.Addrs()[id-1], Username: s.cfg.Username, Password: s.cfg.Password,
			DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
		defer rc.Close()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		// A crash takes a moment to land: a PING that still reaches the old
		// process must not end it.
		time.Sleep(100 * time.Millisecond)
		for {
			if rc.Ping(s.ctx).Err() == nil {
				s.record(f, id, faultlog.End, time.Now())
				return
			}
			select {
			case <-t.C:
			case <-s.ctx.Done():
				return
			}
		}
	})
}

// healLater heals f on node id after d, or at once when the site closes.
func (s *hostSite) healLater(id int, f hostfault.Fault, d time.Duration) {
	s.wg.Go(func() {
		select {
		case <-time.After(d):
		case <-s.ctx.Done():
		}
		s.heal(context.WithoutCancel(s.ctx), id, f)
	})
}

func (s *hostSite) heal(ctx context.Context, id int, f hostfault.Fault) error {
	hctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, _ := s.client(id)
	if err := hostfault.Heal(hctx, c, f); err != nil {
		return err
	}
	s.record(f, id, faultlog.End, time.Now())
	return nil
}

func (s *hostSite) keep(id int, f hostfault.Fault) {
	s.mu.Lock()
	s.active[id] = append(s.active[id], f)
	s.mu.Unlock()
}

// take removes and returns node id's active faults of the given kinds.
func (s *hostSite) take(id int, kinds ...string) []hostfault.Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out, rest []hostfault.Fault
	for _, f := range s.active[id] {
		if slices.Contains(kinds, f.Kind) {
			out = append(out, f)
		} else {
			rest = append(rest, f)
		}
	}
	s.active[id] = rest
	return out
}

func (s *hostSite) crash(ctx context.Context, id int, kind string, p hostfault.Params) (lab.FaultResult, error) {
	f, err := s.inject(ctx, id, kind, p)
	if err == nil {
		s.endWhenAnswering(id, f)
	}
	return lab.FaultResult{}, err
}

// Apply injects one fault of the catalogue on node id, as *lab.Lab.Apply
// does in the lab.
func (s *hostSite) Apply(ctx context.Context, id int, kind fault.Kind, params fault.Params) (lab.FaultResult, error) {
	if err := fault.Validate(kind, params, fault.SSHHost, false); err != nil {
		return lab.FaultResult{}, err
	}
	switch kind {
	case fault.Kill, fault.PowerLoss:
		return s.crash(ctx, id, string(kind), hostfault.Params{})
	case fault.Restart:
		return s.crash(ctx, id, string(kind), hostfault.Params{Delay: params.D("delay")})
	case fault.Stop:
		return s.Stop(ctx, id)
	case fault.Start:
		return s.Start(ctx, id)
	case fault.Pause:
		return s.Pause(ctx, id, params.D(fault.For))
	case fault.Partition:
		return lab.FaultResult{}, s.Partition(ctx, id)
	case fault.Latency:
		return s.Latency(ctx, id, params.D("add"), params.D("jitter"))
	case fault.ClockJump:
		return s.ClockJump(ctx, id, params.D("by"))
	case fault.Heal:
		return lab.FaultResult{}, s.Heal(ctx, id)
	}
	return lab.FaultResult{}, fmt.Errorf("%w: %s", errNotOnHosts, kind)
}

func (s *hostSite) Stop(ctx context.Context, id int) (lab.FaultResult, error) {
	f, err := s.inject(ctx, id, "stop", hostfault.Params{})
	if err == nil {
		s.keep(id, f)
	}
	return lab.FaultResult{}, err
}

func (s *hostSite) Start(ctx context.Context, id int) (lab.FaultResult, error) {
	var errs []error
	for _, f := range s.take(id, "stop") {
		errs = append(errs, s.heal(ctx, id, f))
	}
	if _, err := s.inject(ctx, id, "start", hostfault.Params{}); err != nil {
		errs = append(errs, err)
	}
	return lab.FaultResult{}, errors.Join(errs...)
}

func (s *hostSite) Pause(ctx context.Context, id int, d time.Duration) (lab.FaultResult, error) {
	f, err := s.inject(ctx, id, "pause", hostfault.Params{For: d})
	if err == nil {
		s.healLater(id, f, d)
	}
	return lab.FaultResult{}, err
}

func (s *hostSite) Partition(ctx context.Context, ids ...int) error {
	return onEach(ids, func(id int) string { return "node " + strconv.Itoa(id) }, func(id int) error {
		f, err := s.inject(ctx, id, "partition", hostfault.Params{})
		if err == nil {
			s.keep(id, f)
		}
		return err
	})
}

// Heal ends the partitions and latency of the nodes (all when none), as
// the lab's heal does.
func (s *hostSite) Heal(ctx context.Context, ids ...int) error {
	if len(ids) == 0 {
		ids = seq(len(s.clients))
	}
	return onEach(ids, func(id int) string { return "node " + strconv.Itoa(id) }, func(id int) error {
		var errs []error
		for _, f := range s.take(id, "partition", "latency") {
			errs = append(errs, s.heal(ctx, id, f))
		}
		return errors.Join(errs...)
	})
}

func (s *hostSite) Latency(ctx context.Context, id int, add, jitter time.Duration) (lab.FaultResult, error) {
	var errs []error
	for _, f := range s.take(id, "latency") {
		errs = append(errs, s.heal(ctx, id, f))
	}
	if add > 0 {
		f, err := s.inject(ctx, id, "latency", hostfault.Params{Add: add, Jitter: jitter})
		if err == nil {
			s.keep(id, f)
		}
		errs = append(errs, err)
	}
	return lab.FaultResult{}, errors.Join(errs...)
}

func (s *hostSite) ClockJump(ctx context.Context, id int, by time.Duration) (lab.FaultResult, error) {
	f, err := s.inject(ctx, id, "clock-jump", hostfault.Params{By: by})
	if err == nil {
		s.keep(id, f) // chrony stays stopped until the end of the drill
	}
	return lab.FaultResult{}, err
}

func (s *hostSite) EtcdApply(context.Context, int, fault.Kind, fault.Params) (lab.EtcdFaultResult, error) {
	return lab.EtcdFaultResult{}, errEtcdNotOnHosts
}

func (s *hostSite) EtcdHeal(context.Context, ...int) error { return nil }

var errEtcdNotOnHosts = fmt.Errorf("%w: no etcd members", errNotOnHosts)

// healActive heals every fault still kept (stops, partitions, latency,
// clock jumps), recording their ends.
func (s *hostSite) healActive(ctx context.Context) error {
	return onEach(seq(len(s.clients)), func(id int) string { return "node " + strconv.Itoa(id) }, func(id int) error {
		var errs []error
		for _, f := range s.take(id, hostfault.Kinds()...) {
			errs = append(errs, s.heal(ctx, id, f))
		}
		return errors.Join(errs...)
	})
}

// waitAnswering waits until every node answers PING.
func (s *hostSite) waitAnswering(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return onEach(seq(len(s.clients)), func(id int) string { return "node " + strconv.Itoa(id) }, func(id int) error {
		rc := redis.NewClient(&redis.Options{Addr: s.Addrs()[id-1], Username: s.cfg.Username, Password: s.cfg.Password,
			DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, MaxRetries: -1})
		defer rc.Close()
		for {
			err := rc.Ping(ctx).Err()
			if err == nil {
				return nil
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return fmt.Errorf("does not answer PING at %s: %w", s.Addrs()[id-1], err)
			}
		}
	})
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
		logf("guards %v left out: they lock on etcd members, which the hosts inventory does not list (they run in the lab)", leftOut)
	}
	s, err := openHostSite(ctx, cfg, state, logf)
	if err != nil {
		return nil, fmt.Errorf("drill %s: %w", spec.Name, err)
	}
	defer s.close(ctx)
	// After Jepsen: heal at setup as at the end, whatever a crashed run left.
	if err := s.healAllHosts(ctx); err != nil {
		return nil, fmt.Errorf("drill %s: heal before the run: %w", spec.Name, err)
	}
	weak := weakenings(spec)
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		for id := range weak {
			if err := hostfault.Restore(rctx, s.clients[id-1]); err != nil {
				logf("node %d: restore: %v", id, err)
			}
		}
	}()
	for id, names := range weak {
		logf("node %d: weaken: %v", id, names)
		if err := hostfault.Weaken(ctx, cfg.Inventory, s.clients[id-1], names...); err != nil {
			return nil, fmt.Errorf("drill %s: node %d: %w", spec.Name, id, err)
		}
	}
	if err := s.waitAnswering(ctx, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("drill %s: %w", spec.Name, err)
	}
	logf("hosts: %d nodes over SSH (%v)", len(s.clients), s.Addrs())
	res, err := runLoad(ctx, spec, seed, dir, s, 0, logf)
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	herr := errors.Join(s.healActive(hctx), s.healAllHosts(hctx))
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
	verdict := "PASS"
	if !res.Passed {
		verdict = "FAIL"
	}
	logf("%s (%s, over SSH)", verdict, dir)
	return res, nil
}

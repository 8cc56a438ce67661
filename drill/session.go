package drill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/infra/node"
)

// Session is one lab that serves many drills in turn (an explorer's
// schedules, the replays of drill --repeat): it comes up once with a
// profile, and between two drills Reset heals it, waits out the restart
// delays, clears the lock keys and proves it clean. Every drill a session
// runs must ask for the session's profile. A Session is used by one
// goroutine at a time; Close takes the lab down (also when the process
// dies: the lab is owned by it).
type Session struct {
	prof  profile.Profile
	opts  Options
	state string
	// lab is the session's lab; hosts its hosts over SSH instead
	// (Options.Hosts).
	lab   *lab.Lab
	hosts *hostSite
	logf  func(string, ...any)
	// keysGone is when every lock key the last drill may have left has
	// expired: on hosts, whose keys the lock user may not list, Reset
	// waits for it.
	keysGone time.Time
	// since is when the running drill began: the lab's fault log holds
	// every drill's faults, a drill's history only its own.
	since time.Time

	closeOnce sync.Once
	closeErr  error
}

// NewSession brings a lab up with prof (its defaults filled in) and the
// binaries and directories of opts.Lab, which lives for this process; or,
// with opts.Hosts, opens the hosts of an inventory over SSH, which must
// already run prof (a session weakens no host: a weakening would outlive a
// killed process, and a fault does not, its dead-man switch heals it).
// opts.Monitoring is not for sessions.
func NewSession(ctx context.Context, prof profile.Profile, opts Options) (*Session, error) {
	if opts.Monitoring != nil {
		return nil, errors.New("drill: a session runs without monitoring")
	}
	prof, err := prof.WithDefaults()
	if err != nil {
		return nil, fmt.Errorf("drill: session: %w", err)
	}
	state, err := os.MkdirTemp("", "redlab-session-")
	if err != nil {
		return nil, fmt.Errorf("drill: %w", err)
	}
	s := &Session{prof: prof, opts: opts, state: state, logf: opts.logf("session")}
	if opts.Hosts != nil {
		if err := s.openHosts(ctx); err != nil {
			os.RemoveAll(state)
			return nil, err
		}
		return s, nil
	}
	l, err := upLab(ctx, prof, opts, state, s.logf)
	if err != nil {
		os.RemoveAll(state)
		return nil, err
	}
	s.lab = l
	return s, nil
}

// Profile is the session's lab profile, its defaults filled in.
func (s *Session) Profile() profile.Profile { return s.prof }

// Lab is the session's lab (nil on hosts).
func (s *Session) Lab() *lab.Lab { return s.lab }

// openHosts opens the session on the hosts of opts.Hosts: every host must
// answer, and nothing an earlier run left may stay (healed, as Jepsen
// heals at setup).
func (s *Session) openHosts(ctx context.Context) error {
	cfg := *s.opts.Hosts
	if n := len(cfg.Inventory.Hosts); n != s.prof.Nodes {
		return fmt.Errorf("drill: session: the profile has %d nodes, the inventory %d hosts", s.prof.Nodes, n)
	}
	switch w := weakeningsOf(s.prof); {
	case s.prof.Etcd > 0 || s.prof.Replicas > 0:
		return errors.New("drill: session: a hosts inventory lists Redis nodes only: no etcd members, no replicas")
	case len(w) > 0:
		return fmt.Errorf("drill: session: the profile asks for weaker hosts than production (%s): a session weakens no host, since a weakening would outlive a killed run; weaken them first with `redlab hosts weaken` (and `redlab hosts restore` after)", weakWords(w))
	}
	site, err := openHostSite(ctx, cfg, s.state, s.logf)
	if err != nil {
		return fmt.Errorf("drill: session: %w", err)
	}
	s.hosts = site
	if err := site.healAllHosts(ctx, s.logf); err != nil {
		s.Close(ctx)
		return fmt.Errorf("drill: session: heal before the runs: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := site.hosts.WaitAnswering(wctx); err != nil {
		s.Close(ctx)
		return fmt.Errorf("drill: session: %w", err)
	}
	s.logf("hosts: %d nodes over SSH (%s)", len(site.hosts.Hosts()), strings.Join(site.Addrs(), ", "))
	return nil
}

// weakWords is what weakeningsOf asks for, as people write it.
func weakWords(w map[int][]string) string {
	var out []string
	for id, names := range w {
		out = append(out, fmt.Sprintf("node %d: %s", id, strings.Join(names, ", ")))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// upLab brings up a lab of prof in state, owned by this process (killed,
// even by SIGKILL, it leaves no lab behind, and no directory).
func upLab(ctx context.Context, prof profile.Profile, opts Options, state string, logf func(string, ...any)) (*lab.Lab, error) {
	cfg := opts.Lab
	cfg.StateDir = state
	cfg.Temporary = true
	if cfg.Owner == nil {
		self, err := lab.OwnerOf(os.Getpid())
		if err != nil {
			return nil, fmt.Errorf("drill: %w", err)
		}
		cfg.Owner = &self
	}
	// The profile, run on machines when Options.Lab asks for them.
	machines := cfg.Machines
	cfg.Profile = prof
	cfg.Machines = machines || prof.Machines
	if cfg.PowerLoss {
		// No silent fallback to a weaker model: refuse before the lab comes up.
		if err := node.CheckPowerLoss(); err != nil {
			return nil, fmt.Errorf("power-loss needs the power-loss filesystem on every node's data directory, which this host cannot mount: %w", err)
		}
	}
	var err error
	if cfg.BasePort, err = freeBasePort(state, prof.Nodes, prof.Replicas, prof.Etcd); err != nil {
		return nil, err
	}
	var extra []string
	if prof.Replicas > 0 {
		extra = append(extra, "an asynchronous replica per node")
	}
	if cfg.Machines {
		extra = append(extra, "systemd-nspawn machines")
	}
	if cfg.TLS {
		extra = append(extra, "TLS only")
	}
	if prof.Etcd > 0 {
		extra = append(extra, fmt.Sprintf("%d etcd members", prof.Etcd))
	}
	if cfg.EtcdUnsafeNoFsync {
		extra = append(extra, "etcd without fsync (a negative control)")
	}
	if cfg.PowerLoss {
		extra = append(extra, "the power-loss filesystem")
	}
	delay := "restart delay " + prof.RestartDelay.String()
	if prof.NoRestartDelay {
		delay = "no restart delay"
	}
	logf("lab up: %d nodes, persistence %s, %s%s, state %s (owner pid %d: the lab goes down when it ends)",
		cfg.Nodes, persistenceList(prof.Persistence), delay, prefixed(", ", strings.Join(extra, ", ")), state, cfg.Owner.PID)
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		downLab(ctx, state, cfg.Terraform, logf)
		return nil, fmt.Errorf("lab up: %w", err)
	}
	return l, nil
}

// downLab takes the lab in state down, even when ctx ended: nothing of the
// lab may be left behind.
func downLab(ctx context.Context, state, terraform string, logf func(string, ...any)) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	err := lab.Down(dctx, lab.Config{StateDir: state, Terraform: terraform})
	if err != nil {
		logf("lab down: %v", err)
	} else {
		releasePorts(state)
	}
	return err
}

func prefixed(pre, s string) string {
	if s == "" {
		return ""
	}
	return pre + s
}

// Run runs one drill on the session's lab into dir (made ready as Run
// does), with seed for its draws. spec.Lab must be the session's profile
// (the power-loss filesystem aside: a session with it serves drills that
// do not cut power too).
func (s *Session) Run(ctx context.Context, spec *Spec, dir string, seed uint64) (*Result, error) {
	if err := s.fits(spec); err != nil {
		return nil, err
	}
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	s.since = time.Now()
	logf := s.opts.logf(spec.Name)
	var st site = sessionSite{s.lab, s.since}
	if s.hosts != nil {
		if err := CheckHosts(spec, s.opts.Hosts.Inventory); err != nil {
			return nil, err
		}
		st = sessionHosts{s.hosts, s.since}
	}
	res, err := runLoad(ctx, spec, seed, dir, st, 0, logf)
	s.keysGone = time.Now().Add(keysLast(spec))
	if s.hosts != nil {
		// As runOnHosts: what the schedule left is healed at once.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		herr := errors.Join(s.hosts.hosts.Heal(hctx), s.hosts.healAllHosts(hctx, logf))
		cancel()
		if herr != nil && err == nil {
			err = fmt.Errorf("drill %s: heal after the run: %w", spec.Name, herr)
		}
	}
	if ferr := s.copyFaults(dir); ferr != nil && err == nil {
		err = ferr
	}
	if err != nil {
		return nil, err
	}
	if s.hosts != nil {
		res.Transport = TransportSSH
	} else {
		res.Lab.Machines, res.Lab.TLS, res.Lab.PlainDisks = s.lab.Machines(), s.lab.TLS(), !s.lab.PowerLossLayer()
		res.Lab.EtcdUnsafeNoFsync = s.lab.EtcdUnsafeNoFsync()
	}
	if err := writeJSON(filepath.Join(dir, ResultFile), res); err != nil {
		return nil, err
	}
	if err := WriteTimeline(dir); err != nil {
		return nil, err
	}
	logf("%s (%s)", res.Verdict(), dir)
	return res, nil
}

// fits says why spec cannot run on the session's lab, or nil.
func (s *Session) fits(spec *Spec) error {
	want := s.prof
	got, err := spec.Lab.WithDefaults()
	if err != nil {
		return fmt.Errorf("drill %s: %w", spec.Name, err)
	}
	got.PowerLoss = want.PowerLoss
	if spec.CutsPower() && !want.PowerLoss {
		return fmt.Errorf("drill %s cuts power: the session's lab needs the power-loss filesystem", spec.Name)
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		return fmt.Errorf("drill %s asks for lab %+v, the session runs %+v", spec.Name, got, want)
	}
	return nil
}

// copyFaults copies the lab's fault events of the drill that just ran into
// its directory's fault log.
func (s *Session) copyFaults(dir string) error {
	var fs []lab.Fault
	var err error
	if s.hosts != nil {
		fs, err = s.hosts.Faults()
	} else {
		fs, err = s.lab.Faults()
	}
	if err != nil {
		return err
	}
	var evs []faultlog.Event
	for _, f := range sinceFaults(fs, s.since) {
		evs = append(evs, f.Events()...)
	}
	if len(evs) == 0 {
		return nil
	}
	if err := faultlog.Append(filepath.Join(dir, faultlog.FileName), evs...); err != nil {
		return fmt.Errorf("drill: %w", err)
	}
	return nil
}

// sinceFaults are the faults of fs that started at or after t.
func sinceFaults(fs []lab.Fault, t time.Time) []lab.Fault {
	var out []lab.Fault
	for _, f := range fs {
		if !f.Start.Before(t) {
			out = append(out, f)
		}
	}
	return out
}

// sessionSite is the session's lab as a drill's site: its fault record
// starts where the drill does.
type sessionSite struct {
	*lab.Lab
	since time.Time
}

func (s sessionSite) Faults() ([]lab.Fault, error) {
	fs, err := s.Lab.Faults()
	return sinceFaults(fs, s.since), err
}

// sessionHosts is the session's hosts as a drill's site, likewise.
type sessionHosts struct {
	*hostSite
	since time.Time
}

func (s sessionHosts) Faults() ([]lab.Fault, error) {
	fs, err := s.hostSite.Faults()
	return sinceFaults(fs, s.since), err
}

// keysLast is how long after a drill the lock keys it granted may live:
// its TTL, and as much again as a clock stepped back lengthened them.
func keysLast(spec *Spec) time.Duration {
	d := spec.Workload.LockTTL
	for _, f := range spec.Faults {
		if by := f.Params.D("by"); by < 0 {
			d += -by
		}
	}
	return d + time.Second
}

// Clean is what Reset found: Problems is empty when the lab was proved
// clean.
type Clean struct {
	// Waited is how long Reset waited for the lab (restart delays, keys).
	Waited   time.Duration
	Problems []string
}

// OK reports whether the lab was proved clean.
func (c Clean) OK() bool { return len(c.Problems) == 0 }

// Reset makes the lab ready for the next drill, as a fresh lab would be:
// every network fault healed, stopped nodes started, crashed nodes back
// after their restart delay, every key gone from every node and every
// lock key from etcd; then it proves it (Clean). An error is a lab that
// could not be asked; a lab that is not clean is reported in Clean.
func (s *Session) Reset(ctx context.Context) (Clean, error) {
	if s.hosts != nil {
		return s.resetHosts(ctx)
	}
	start := time.Now()
	l := s.lab
	if err := errors.Join(l.Heal(ctx), l.EtcdHeal(ctx)); err != nil {
		return Clean{}, fmt.Errorf("drill: reset: heal: %w", err)
	}
	// A crash ends when the node answers again, after its restart delay.
	patience := s.prof.RestartDelay + 30*time.Second
	sts, err := s.waitNodes(ctx, patience)
	if err != nil {
		return Clean{}, err
	}
	creds, err := l.Credentials()
	if err != nil {
		return Clean{}, err
	}
	var c Clean
	for _, st := range sts {
		if st.State != node.Up {
			c.Problems = append(c.Problems, fmt.Sprintf("node %d is %s", st.ID, st.State))
		}
		if len(st.Active) > 0 {
			c.Problems = append(c.Problems, fmt.Sprintf("node %d still has faults in force (%s)", st.ID, activeKinds(st.Active)))
		}
	}
	for _, n := range l.Nodes() {
		if err := flushNode(ctx, n, creds, l); err != nil {
			c.Problems = append(c.Problems, fmt.Sprintf("node %d: %v", n.ID, err))
		}
	}
	if s.prof.Etcd > 0 {
		if err := s.resetEtcd(ctx, patience); err != nil {
			c.Problems = append(c.Problems, err.Error())
		}
	}
	c.Waited = time.Since(start)
	return c, nil
}

// resetHosts heals the hosts, waits until every node answers and the last
// drill's keys have expired (the lock user may not list keys, so the time
// they may last is waited out).
func (s *Session) resetHosts(ctx context.Context) (Clean, error) {
	start := time.Now()
	if err := errors.Join(s.hosts.hosts.Heal(ctx), s.hosts.healAllHosts(ctx, s.logf)); err != nil {
		return Clean{}, fmt.Errorf("drill: reset: heal: %w", err)
	}
	var c Clean
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := s.hosts.hosts.WaitAnswering(wctx); err != nil {
		c.Problems = append(c.Problems, err.Error())
	}
	if wait := time.Until(s.keysGone); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return c, ctx.Err()
		}
	}
	c.Waited = time.Since(start)
	return c, nil
}

// waitNodes waits until every node is up with no fault in force (a stopped
// node is started), or patience runs out, and returns their status.
func (s *Session) waitNodes(ctx context.Context, patience time.Duration) ([]lab.NodeStatus, error) {
	deadline := time.Now().Add(patience)
	for {
		sts, err := s.lab.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("drill: reset: %w", err)
		}
		ready := true
		for _, st := range sts {
			if st.State == node.Stopped {
				if _, err := s.lab.Start(ctx, st.ID); err != nil {
					return nil, fmt.Errorf("drill: reset: start node %d: %w", st.ID, err)
				}
			}
			if st.State != node.Up || len(st.Active) > 0 || (st.Replica != nil && st.Replica.State != node.Up) {
				ready = false
			}
		}
		if ready || time.Now().After(deadline) {
			return sts, nil
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func activeKinds(m map[lab.FaultKind]string) string {
	var ks []string
	for k := range m {
		ks = append(ks, string(k))
	}
	return strings.Join(ks, ", ")
}

// flushNode deletes every key of node n, straight on its redis-server
// (as the lab's admin; no fault front stands there), and checks through
// its front, as clients see it, that none is left.
func flushNode(ctx context.Context, n lab.Node, creds lab.Credentials, l *lab.Lab) error {
	tlsCfg, err := l.TLSConfig()
	if err != nil {
		return err
	}
	client := func(addr string) *redis.Client {
		return redis.NewClient(&redis.Options{Addr: addr, Username: creds.Admin.Name, Password: creds.Admin.Password, TLSConfig: tlsCfg,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: 2})
	}
	direct := client(n.RedisAddr)
	defer direct.Close()
	if err := direct.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("flush %s: %w", n.RedisAddr, err)
	}
	front := client(n.Addr)
	defer front.Close()
	keys, err := front.DBSize(ctx).Result()
	switch {
	case err != nil:
		return fmt.Errorf("through its front %s: %w", n.Addr, err)
	case keys != 0:
		return fmt.Errorf("%d keys left after a flush", keys)
	}
	return nil
}

// resetEtcd waits until every etcd member is healthy and deletes every key
// the guards left (their leases may outlive a fault).
func (s *Session) resetEtcd(ctx context.Context, patience time.Duration) error {
	deadline := time.Now().Add(patience)
	for {
		sts, err := s.lab.EtcdStatus(ctx)
		healthy := err == nil
		for _, st := range sts {
			healthy = healthy && st.State == node.Up && len(st.Active) == 0
		}
		if healthy {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd members not all up and healed after %v", patience)
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.lab.EtcdEndpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Delete(cctx, "", clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("etcd: clear the keys: %w", err)
	}
	resp, err := cli.Get(cctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("etcd: count the keys: %w", err)
	}
	if resp.Count != 0 {
		return fmt.Errorf("etcd: %d keys left after a delete", resp.Count)
	}
	return nil
}

// Close takes the session's lab down, or ends its sessions with the hosts
// (what a fault still holds there is healed first); it is idempotent.
func (s *Session) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		switch {
		case s.lab != nil:
			s.closeErr = downLab(ctx, s.state, s.lab.Config().Terraform, s.logf)
		case s.hosts != nil:
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			s.closeErr = errors.Join(s.hosts.hosts.Heal(hctx), s.hosts.healAllHosts(hctx, s.logf))
			cancel()
			s.hosts.hosts.Close()
		}
		os.RemoveAll(s.state)
	})
	return s.closeErr
}

// The SSH fault session: the faults of one run (a drill on hosts, one
// `redlab fault --hosts`) on the hosts of an inventory, each host a fault
// target (fault.Injector).

package hostfault

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redlocklab/redlocklab/internal/prose"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
	"github.com/redlocklab/redlocklab/infra/remote"
)

// Session is one run's faults on hosts of an inventory over SSH: a
// connection per host, and each host a fault target (Host). Every fault it
// injects arms its dead-man switch first (Inject), and the session keeps
// what has something to heal until it ends:
//
//   - a crash (kill, power-loss, restart) ends when the node answers PING
//     again, which the session watches for when it records its faults;
//   - a fault given a `for` (pause; a partition or latency given one) is
//     healed by the session once `for` has passed;
//   - the others last until a heal: start heals a stop, heal the
//     partitions and latency, a new latency the one before, and Heal or
//     Hold everything kept (clock-jump keeps chrony stopped until then).
//
// What the session still keeps at Close stays to the dead-man switches: a
// runner that dies, or a `redlab fault --hosts` that returns at once,
// leaves hosts that heal themselves.
type Session struct {
	inv  *hosts.Inventory
	o    SessionOptions
	nums []int                  // the hosts dialed, by their number in the inventory
	conn map[int]*remote.Client // by number

	done  chan struct{} // closed by Close: the session's goroutines end
	close sync.Once
	wg    sync.WaitGroup

	mu   sync.Mutex
	kept map[int][]*kept // by host number
}

// kept is a fault that has something left to heal.
type kept struct {
	f     Fault
	ended bool // its end is recorded (a crash answered again)
}

// SessionOptions say how a session injects and what it records.
type SessionOptions struct {
	// Options bound the dead-man switches and say whom a partition cuts
	// the hosts off from.
	Options
	Remote remote.Config
	// FaultLog, when set, is the faults.jsonl the session records its
	// faults in (package faultlog): each start, and each end, a crash's
	// when its node answers PING again as Username with Password.
	FaultLog           string
	Username, Password string
	// Healed, when set, is told of every fault the session heals.
	Healed func(host int, f Fault)
	// Log, when set, is told what goes wrong in the session's own
	// goroutines (a timed heal that failed).
	Log func(format string, a ...any)
}

// Dial connects to the hosts numbered nums (from 1) of inv, all of them when
// nums is empty, and returns their session.
func Dial(ctx context.Context, inv *hosts.Inventory, nums []int, o SessionOptions) (*Session, error) {
	if len(nums) == 0 {
		for i := range inv.Hosts {
			nums = append(nums, i+1)
		}
	}
	picked, err := inv.Pick(nums...)
	if err != nil {
		return nil, err
	}
	s := &Session{inv: inv, o: o, nums: slices.Clone(nums), conn: map[int]*remote.Client{}, done: make(chan struct{}), kept: map[int][]*kept{}}
	clients := make([]*remote.Client, len(picked))
	errs := make([]error, len(picked))
	var wg sync.WaitGroup
	for i, h := range picked {
		wg.Go(func() { clients[i], errs[i] = remote.Dial(ctx, h, o.Remote) })
	}
	wg.Wait()
	for i, c := range clients {
		if c != nil {
			s.conn[s.nums[i]] = c
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Hosts are the numbers of the session's hosts, in the order dialed.
func (s *Session) Hosts() []int { return slices.Clone(s.nums) }

// Close ends the session's goroutines (a timed heal still pending does not
// run: the fault's switch heals it) and its connections. It is idempotent.
func (s *Session) Close() {
	s.close.Do(func() {
		close(s.done)
		s.wg.Wait()
		for _, c := range s.conn {
			c.Close()
		}
	})
}

// Host is host n (from 1) as a fault target: the catalogue's faults for
// hosts over SSH (fault.SSHHost). The result's Target is n, its HealsBy
// when the fault's switch fires.
func (s *Session) Host(n int) fault.Injector { return hostInjector{s, n} }

type hostInjector struct {
	s *Session
	n int
}

func (h hostInjector) Apply(ctx context.Context, kind fault.Kind, p fault.Params) (fault.Result, error) {
	c, ok := h.s.conn[h.n]
	if !ok {
		return fault.Result{Kind: kind}, fmt.Errorf("hostfault: no host %d in this session (hosts %s)", h.n, prose.List(h.s.nums))
	}
	if err := fault.Validate(kind, p, fault.SSHHost, false); err != nil {
		return fault.Result{Kind: kind}, err
	}
	res, err := hostFaults.Apply(ctx, host{h.s, h.n, c, kind}, kind, p)
	res.Target = h.n
	return res, err
}

// host is one fault's host: what its table's entries act on.
type host struct {
	s    *Session
	n    int
	c    *remote.Client
	kind fault.Kind
}

// hostFaults is the SSH transport's implementation of the catalogue's
// faults for hosts: each kind of the command table (table.go) applied as
// apply does, but a latency, which replaces the one before; and heal, which
// has no commands of its own.
var hostFaults = func() fault.Table[host] {
	tb := fault.Table[host]{Target: fault.SSHHost, Where: "package hostfault"}
	for _, spec := range Table {
		fn := host.apply
		if fault.Kind(spec.Kind) == fault.Latency {
			fn = host.latency
		}
		tb = tb.With(fault.Kind(spec.Kind), fn)
	}
	return tb.With(fault.Heal, host.heal)
}()

// Implementation is what the SSH transport implements, for the test that
// holds every target's implementation to the catalogue.
func Implementation() fault.Implementation { return hostFaults.Implementation() }

// inject injects h's kind with p and records its start when it is kept.
func (h host) inject(ctx context.Context, p fault.Params) (*kept, fault.Result, error) {
	at := time.Now()
	f, err := Inject(ctx, h.c, Fault{Kind: string(h.kind), Host: h.c.Host()}, p, h.s.o.Options)
	if err != nil {
		return nil, fault.Result{}, err
	}
	res := fault.Result{ID: f.ID, Start: at}
	if f.DeadMan == 0 {
		return nil, res, nil
	}
	res.HealsBy = at.Add(f.DeadMan)
	k := &kept{f: f}
	h.s.record(h.n, f, faultlog.Start, at)
	h.s.mu.Lock()
	h.s.kept[h.n] = append(h.s.kept[h.n], k)
	h.s.mu.Unlock()
	return k, res, nil
}

// apply heals the faults kept that h's kind ends (the catalogue's
// HealedBy: start ends a stop), then injects it. A crash's end is the
// node's answer; another fault is kept, and healed after its `for` when it
// has one.
func (h host) apply(ctx context.Context, p fault.Params) (fault.Result, error) {
	herr := h.s.healKept(ctx, h.n, h.kind)
	k, res, err := h.inject(ctx, p)
	if err != nil {
		return res, errors.Join(herr, err)
	}
	spec, _ := Lookup(string(h.kind))
	switch {
	case spec.Crash:
		if k == nil {
			// Nothing to heal (a power loss: the reboot heals it); its end
			// is the node's answer all the same.
			k = &kept{f: Fault{ID: res.ID, Kind: string(h.kind), Host: h.c.Host()}}
			h.s.record(h.n, k.f, faultlog.Start, res.Start)
		}
		h.s.endWhenAnswering(ctx, h.n, k)
	case k != nil && p.D(fault.For) > 0:
		h.s.healAfter(ctx, h.n, k, p.D(fault.For))
	}
	return res, herr
}

// heal heals the partitions and latency kept.
func (h host) heal(ctx context.Context, _ fault.Params) (fault.Result, error) {
	return fault.Result{}, h.s.healKept(ctx, h.n, fault.Heal)
}

// latency heals the latency kept, then injects the new one, unless it is
// 0 (which removes it).
func (h host) latency(ctx context.Context, p fault.Params) (fault.Result, error) {
	err := h.s.heal(ctx, h.n, h.s.take(h.n, func(f Fault) bool { return f.Kind == string(fault.Latency) }))
	if p.D("add") == 0 {
		return fault.Result{}, err
	}
	res, ierr := h.apply(ctx, p)
	return res, errors.Join(err, ierr)
}

// healKept heals the faults kept on host n that kind heals (the
// catalogue's HealedBy).
func (s *Session) healKept(ctx context.Context, n int, kind fault.Kind) error {
	return s.heal(ctx, n, s.take(n, func(f Fault) bool {
		d, _ := fault.Lookup(fault.Kind(f.Kind))
		return d.HealedBy == kind
	}))
}

// take removes and returns the faults kept on host n that which selects.
func (s *Session) take(n int, which func(Fault) bool) []*kept {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out, rest []*kept
	for _, k := range s.kept[n] {
		if which(k.f) {
			out = append(out, k)
		} else {
			rest = append(rest, k)
		}
	}
	s.kept[n] = rest
	return out
}

// heal heals ks on host n (each bounded by a minute), recording their ends.
func (s *Session) heal(ctx context.Context, n int, ks []*kept) error {
	var errs []error
	for _, k := range ks {
		hctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := Heal(hctx, s.conn[n], k.f)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.end(n, k)
		if s.o.Healed != nil {
			s.o.Healed(n, k.f)
		}
	}
	return errors.Join(errs...)
}

// Heal heals every fault the session keeps, on every host at once.
func (s *Session) Heal(ctx context.Context) error {
	return s.Each(func(n int) error { return s.heal(ctx, n, s.take(n, func(Fault) bool { return true })) })
}

// Hold waits d, or until ctx ends (an interrupt), then heals every fault
// the session keeps, whatever became of ctx.
func (s *Session) Hold(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return s.Heal(context.WithoutCancel(ctx))
}

// healAfter heals k on host n after d, unless something healed it first or
// the session ends.
func (s *Session) healAfter(ctx context.Context, n int, k *kept, d time.Duration) {
	ctx = context.WithoutCancel(ctx)
	s.wg.Go(func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.done:
			return
		}
		if err := s.heal(ctx, n, s.take(n, func(f Fault) bool { return f.ID == k.f.ID })); err != nil && s.o.Log != nil {
			s.o.Log("host %d: %v", n, err)
		}
	})
}

// endWhenAnswering records k's end once host n's node answers PING again,
// when the session records its faults.
func (s *Session) endWhenAnswering(ctx context.Context, n int, k *kept) {
	if s.o.FaultLog == "" {
		return
	}
	ctx = context.WithoutCancel(ctx)
	s.wg.Go(func() {
		rc := s.redis(n, 200*time.Millisecond)
		defer rc.Close()
		// A crash takes a moment to land: a PING that still reaches the old
		// process must not end it.
		wait := 100 * time.Millisecond
		for {
			select {
			case <-time.After(wait):
			case <-s.done:
				return
			}
			wait = 50 * time.Millisecond
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			err := rc.Ping(pctx).Err()
			cancel()
			if err == nil {
				s.end(n, k)
				return
			}
		}
	})
}

// end records the end of k on host n, once.
func (s *Session) end(n int, k *kept) {
	s.mu.Lock()
	ended := k.ended
	k.ended = true
	s.mu.Unlock()
	if !ended {
		s.record(n, k.f, faultlog.End, time.Now())
	}
}

// redis is a client of host n's Redis node as the session's user.
func (s *Session) redis(n int, timeout time.Duration) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.inv.Hosts[n-1].Redis, Username: s.o.Username, Password: s.o.Password,
		DialTimeout: timeout, ReadTimeout: timeout, MaxRetries: -1})
}

// WaitAnswering waits until every host's node answers PING.
func (s *Session) WaitAnswering(ctx context.Context) error {
	return s.Each(func(n int) error {
		rc := s.redis(n, 500*time.Millisecond)
		defer rc.Close()
		for {
			err := rc.Ping(ctx).Err()
			if err == nil {
				return nil
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return fmt.Errorf("does not answer PING at %s: %w", s.inv.Hosts[n-1].Redis, err)
			}
		}
	})
}

// record appends f's event on host n to the session's fault log, if it
// keeps one.
func (s *Session) record(n int, f Fault, phase faultlog.Phase, at time.Time) {
	if s.o.FaultLog == "" {
		return
	}
	if err := faultlog.Append(s.o.FaultLog, faultlog.Event{ID: f.ID, Node: n, Kind: faultlog.Kind(f.Kind), Phase: phase, Time: at.UTC()}); err != nil && s.o.Log != nil {
		s.o.Log("node %d: record %s: %v", n, f.Kind, err)
	}
}

// HealAll heals everything redlab may have left on every host of the
// session (HealAll of each), and returns what each found, by host number.
func (s *Session) HealAll(ctx context.Context) (map[int]string, error) {
	var mu sync.Mutex
	outs := map[int]string{}
	err := s.Each(func(n int) error {
		out, err := HealAll(ctx, s.conn[n], s.conn[n].Host())
		mu.Lock()
		outs[n] = out
		mu.Unlock()
		return err
	})
	return outs, err
}

// Weaken applies the named weakenings to host n (Weaken); Restore undoes
// them.
func (s *Session) Weaken(ctx context.Context, n int, names ...string) error {
	return Weaken(ctx, s.inv, s.conn[n], names...)
}

// Restore undoes every weakening on host n.
func (s *Session) Restore(ctx context.Context, n int) error { return Restore(ctx, s.conn[n]) }

// Each runs do for every host of the session at once and joins their
// errors, each named by its host.
func (s *Session) Each(do func(n int) error) error {
	errs := make([]error, len(s.nums))
	var wg sync.WaitGroup
	for i, n := range s.nums {
		wg.Go(func() {
			if err := do(n); err != nil {
				errs[i] = fmt.Errorf("host %s: %w", strconv.Itoa(n), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

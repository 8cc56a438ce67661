package drill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/inventory"
)

// targets are where a drill's faults go: each node and each etcd member
// (lab.TargetLeader: the one leading when a fault fires) as a fault target
// (*lab.Lab, or hosts over SSH).
type targets interface {
	Injector(id int) fault.Injector
	EtcdInjector(member int) fault.Injector
}

var _ targets = (*lab.Lab)(nil)

// pauser freezes lock holders inside their critical section, in the
// drill's own process: the client-pause with scope request. It is a guard's
// pause hook; Arm makes the next count holders that reach the hook stop for
// d, ignoring their context, as a paused process would. Only the holder's
// goroutine stops; scope process stops a whole serve process (serveProcs).
type pauser struct {
	guard   inventory.Guard
	hist    *History
	armed   atomic.Int64
	forNs   atomic.Int64
	seq     atomic.Int64
	wg      sync.WaitGroup
	stopped chan struct{}
	once    sync.Once
}

func newPauser(g inventory.Guard, h *History) *pauser {
	return &pauser{guard: g, hist: h, stopped: make(chan struct{})}
}

// Arm freezes the next count holders for d.
func (p *pauser) Arm(d time.Duration, count int) {
	p.forNs.Store(int64(d))
	p.armed.Store(int64(count))
}

// hook is the guard's pause hook.
func (p *pauser) hook(_ context.Context, _ inventory.Request) {
	for {
		n := p.armed.Load()
		if n <= 0 {
			return
		}
		if p.armed.CompareAndSwap(n, n-1) {
			break
		}
	}
	d := time.Duration(p.forNs.Load())
	id := fmt.Sprintf("client-pause-%s-%d", p.guard, p.seq.Add(1))
	p.hist.AddPause(id, p.guard, inventory.ScopeRequest, "start", time.Now())
	t := time.NewTimer(d)
	defer t.Stop()
	// A pause ignores the request's context, but not the end of the drill
	// (an aborted drill must not wait out a long pause).
	select {
	case <-t.C:
	case <-p.stopped:
	}
	p.hist.AddPause(id, p.guard, inventory.ScopeRequest, "end", time.Now())
}

// stop wakes paused holders (an aborted drill).
func (p *pauser) stop() { p.once.Do(func() { close(p.stopped) }) }

// service is the reservation service as a fault target
// (fault.ServiceProcess): a client-pause freezes lock holders inside their
// critical section, each guard's as the run set it up: in the drill's own
// process (its pauser: scope request), or its whole `redlab serve`
// processes (its serveProcs: scope process).
type service struct {
	pausers map[inventory.Guard]*pauser
	procs   map[inventory.Guard]*serveProcs
}

// serviceFaults is the service process's implementation of the catalogue.
var serviceFaults = fault.Table[*service]{Target: fault.ServiceProcess, Where: "package drill"}.
	With(fault.ClientPause, (*service).clientPause)

// Apply applies a fault of the catalogue on the service (fault.Injector).
func (s *service) Apply(ctx context.Context, kind fault.Kind, p fault.Params) (fault.Result, error) {
	if err := fault.Validate(kind, p, fault.ServiceProcess, false); err != nil {
		return fault.Result{Kind: kind}, err
	}
	return serviceFaults.Apply(ctx, s, kind, p)
}

// clientPause freezes count holders (default 1) of each guard p names
// (default: every guard) for p's `for`.
func (s *service) clientPause(ctx context.Context, p fault.Params) (fault.Result, error) {
	count := 1
	if p.Has("count") {
		count = int(p.N("count"))
	}
	var guards []inventory.Guard
	for _, name := range p["guards"].Names {
		g, err := inventory.ParseAnyGuard(name)
		if err != nil {
			return fault.Result{}, &fault.Error{Kind: fault.ClientPause, Param: "guards", Rule: err.Error()}
		}
		guards = append(guards, g)
	}
	var errs []error
	for g, pa := range s.pausers {
		if len(guards) > 0 && !slices.Contains(guards, g) {
			continue
		}
		if sp, ok := s.procs[g]; ok {
			errs = append(errs, sp.Arm(ctx, p.D(fault.For), count))
		} else {
			pa.Arm(p.D(fault.For), count)
		}
	}
	return fault.Result{}, errors.Join(errs...)
}

// pauseParams are a client-pause's params as the service takes them: the
// guards by name.
func pauseParams(f Fault) fault.Params {
	p := fault.Params{}
	maps.Copy(p, f.Params)
	delete(p, "guards")
	delete(p, "scope") // the run set the scope up
	if len(f.Guards) > 0 {
		names := make([]string, len(f.Guards))
		for i, g := range f.Guards {
			names[i] = string(g)
		}
		p["guards"] = fault.Value{Names: names}
	}
	return p
}

// injector runs a drill's fault schedule against the lab.
type injector struct {
	// at are the nodes and etcd members, service the reservation service.
	at      targets
	service *service
	log     func(format string, a ...any)
	nodeN   int
	// etcdN are the lab's etcd members (drill/etcd.go); members remembers
	// which ones each etcd fault acted on.
	etcdN   int
	members resolvedMembers

	plMu    sync.Mutex
	plModel string // the model of the power losses that ran
}

func (in *injector) notePowerLoss(r fault.Result) {
	if r.PowerLoss == nil {
		return
	}
	in.plMu.Lock()
	in.plModel = r.PowerLoss.Model
	in.plMu.Unlock()
}

func (in *injector) powerLossModel() string {
	in.plMu.Lock()
	defer in.plMu.Unlock()
	return in.plModel
}

// run applies the faults at their offsets from start, then heals every
// network fault at end. Steps due at the same instant on the Redis nodes and
// on the etcd members (a fault and its twin on the etcd members) run at
// once, so that neither waits for the other to be applied (a power cut
// takes up to a second); steps on the same kind of target keep the spec's
// order. It returns the first error; the schedule goes on after an error so
// that heals still run.
func (in *injector) run(ctx context.Context, start time.Time, faults []Fault, end time.Duration) error {
	var steps []step
	for _, f := range faults {
		f := f
		etcd := len(f.Etcd) > 0
		steps = append(steps, step{f.At, f.String(), etcd, func(ctx context.Context) error { return in.apply(ctx, f) }})
		if def, _ := fault.Lookup(f.Kind); def.For == fault.ForEnds && f.For() > 0 && f.At+f.For() < end {
			steps = append(steps, step{f.At + f.For(), "heal " + f.Targets(), etcd, func(ctx context.Context) error {
				return in.heal(ctx, f)
			}})
		}
	}
	// A stable sort keeps the spec's order for faults at the same time.
	slices.SortStableFunc(steps, func(a, b step) int { return cmp.Compare(a.at, b.at) })
	var (
		mu   sync.Mutex
		errs []error
	)
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	for len(steps) > 0 {
		n := 1
		for n < len(steps) && steps[n].at == steps[0].at {
			n++
		}
		batch := steps[:n]
		steps = steps[n:]
		if wait := time.Until(start.Add(batch[0].at)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var wg sync.WaitGroup
		for _, etcd := range []bool{false, true} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, s := range batch {
					if s.etcd != etcd {
						continue
					}
					in.log("t=%5.1fs %s", time.Since(start).Seconds(), s.desc)
					if err := s.do(ctx); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("drill: at %v, %s: %w", s.at, s.desc, err))
						mu.Unlock()
						in.log("t=%5.1fs %s failed: %v", time.Since(start).Seconds(), s.desc, err)
					}
				}
			}()
		}
		wg.Wait()
	}
	return errors.Join(errs...)
}

// step is one action of a fault schedule: a fault, or the heal at its
// `for`; etcd when it acts on etcd members.
type step struct {
	at   time.Duration
	desc string
	etcd bool
	do   func(ctx context.Context) error
}

// healAll ends every network fault (partitions, latency) at the end of the
// load, so that the drain and the audit run on a healed lab.
func (in *injector) healAll(ctx context.Context) error {
	return errors.Join(in.healNodes(ctx, seq(in.nodeN)), in.healEtcd(ctx))
}

// healNodes ends the network faults of the nodes ids.
func (in *injector) healNodes(ctx context.Context, ids []int) error {
	return in.onNodes(ctx, ids, fault.Heal, nil)
}

// apply starts one fault on all its nodes at once.
func (in *injector) apply(ctx context.Context, f Fault) error {
	if len(f.Etcd) > 0 {
		return in.applyEtcd(ctx, f)
	}
	switch f.Kind {
	case fault.Heal:
		if len(f.Nodes) == 0 {
			return in.healAll(ctx)
		}
		return in.healNodes(ctx, f.Nodes)
	case fault.ClientPause:
		_, err := in.service.Apply(ctx, f.Kind, pauseParams(f))
		return err
	}
	return in.onNodes(ctx, f.Nodes, f.Kind, f.Params)
}

// onNodes applies kind with p on the nodes ids at once.
func (in *injector) onNodes(ctx context.Context, ids []int, kind fault.Kind, p fault.Params) error {
	return onEach(ids, func(id int) string { return "node " + strconv.Itoa(id) }, func(id int) error {
		r, err := in.at.Injector(id).Apply(ctx, kind, p)
		in.notePowerLoss(r)
		return err
	})
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// onEach runs do for every id at once and joins their errors, each named
// by what(id).
func onEach(ids []int, what func(int) string, do func(id int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := do(id); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", what(id), err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

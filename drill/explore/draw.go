package explore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/redlocklab/redlocklab/drill/spec"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen/loadspec"
)

// Shape is the load every schedule runs: short TTLs and holds, as
// Jepsen's lock workloads use 2 s leases, so that each schedule lasts
// seconds and a fault of a few seconds outlives a lock. Holds are a good
// part of the TTL and longer than a node takes to restart, and the keys
// few enough that a lock lost under its holder has a waiter to take it:
// otherwise a lock the lab forgets goes unnoticed.
type Shape struct {
	Rate     float64 // per guard
	Duration time.Duration
	Keys     int // uniform over this many SKUs per guard
	// Stock is each SKU's seeded stock: a few short of the reservations it
	// gets, so that stock runs out and the model checker sees refusals.
	Stock          int64
	LockTTL        time.Duration
	AcquireTimeout time.Duration
	Hold           loadspec.HoldSpec
	// FirstFault and LastFault bound when faults start; a fault ends at
	// the latest one second before the load does.
	FirstFault, LastFault time.Duration
	// MaxFaults is the most faults a schedule draws (at least one).
	MaxFaults int
}

// DefaultShape is the load of a schedule.
func DefaultShape() Shape {
	return Shape{
		Rate: 20, Duration: 10 * time.Second, Keys: 32, Stock: 5,
		LockTTL: 2 * time.Second, AcquireTimeout: time.Second,
		Hold:       loadspec.HoldSpec{Min: 200 * time.Millisecond, Max: 1500 * time.Millisecond},
		FirstFault: 2 * time.Second, LastFault: 7 * time.Second, MaxFaults: 3,
	}
}

// DefaultGuards are the guards every schedule runs when none are given:
// the seed's locks, with one database control.
var DefaultGuards = []inventory.Guard{
	inventory.GuardRedisSingle, inventory.GuardRedlock, inventory.GuardRedlockFenced, inventory.GuardRedsync,
	inventory.GuardEtcd, inventory.GuardEtcdFenced, inventory.GuardDBAtomic,
}

// DefaultLab is the lab of a search when --lab is not given: the Redlock
// operating rules (fsync always, a restart delay a bit more than the TTL)
// on five nodes.
func DefaultLab(ttl time.Duration) profile.Profile {
	return profile.Profile{Nodes: 5, Persistence: []profile.Persistence{profile.PersistAlways}, RestartDelay: ttl + time.Second}
}

// Draw is schedule i of seed: a drill spec, and the same spec for the same
// (seed, i) and config, whatever ran before it. Its expectations state
// safety for every guard (no lock violation, no lost update), so that a
// replay with `redlab drill` fails where the schedule found harm.
func (c *Config) Draw(i int) *spec.Spec {
	rng := rand.New(rand.NewPCG(c.Seed, uint64(i)*0x9e3779b97f4a7c15+1))
	sh := c.Shape
	s := &spec.Spec{
		Name:  fmt.Sprintf("explore-%d-%03d", c.Seed, i),
		Title: fmt.Sprintf("schedule %d of seed %d", i, c.Seed),
		Lab:   c.Lab,
		Workload: spec.Workload{
			Guards: slices.Clone(c.Guards), Rate: sh.Rate, Duration: sh.Duration,
			Keys: loadspec.KeySpec{Kind: "uniform", N: sh.Keys}, Hold: sh.Hold, Quantity: loadspec.QuantitySpec{Min: 1, Max: 1},
			LockTTL: sh.LockTTL, AcquireTimeout: sh.AcquireTimeout, Replicas: spec.DefaultReplicas, Stock: sh.Stock,
			Seed: rng.Uint64() >> 1,
		},
		Expect: map[inventory.Guard][]spec.Expectation{},
	}
	n := 1 + rng.IntN(max(sh.MaxFaults, 1))
	for range n {
		s.Faults = append(s.Faults, c.drawFault(rng))
	}
	sort.SliceStable(s.Faults, func(a, b int) bool { return s.Faults[a].At < s.Faults[b].At })
	leaderOnlyWithQuorum(s.Faults, c.Lab.Etcd)
	s.Faults = onlyRunningNodes(s.Faults, c.Lab.RestartDelay)
	for _, g := range s.Workload.Guards {
		s.Expect[g] = safetyExpectations(g, s.Lab.Nodes)
	}
	return s
}

// safetyExpectations state that guard g keeps its lock and its data.
func safetyExpectations(g inventory.Guard, nodes int) []spec.Expectation {
	var exprs []string
	if g.Locks() {
		exprs = append(exprs, "safety.lock_violations==0")
	}
	exprs = append(exprs, "safety.lost_updates==0")
	out := make([]spec.Expectation, len(exprs))
	for i, e := range exprs {
		out[i], _ = spec.ParseExpectation(e, nodes)
	}
	return out
}

// drawFault draws one fault: a family, a kind of it, a target and the
// parameters, within the catalogue's bounds and the shape's times.
func (c *Config) drawFault(rng *rand.Rand) spec.Fault {
	sh := c.Shape
	fam, _ := lookup(c.Families[rng.IntN(len(c.Families))])
	kind := fam.Kinds[rng.IntN(len(fam.Kinds))]
	steps := int((sh.LastFault-sh.FirstFault)/(100*time.Millisecond)) + 1
	f := spec.Fault{At: sh.FirstFault + time.Duration(rng.IntN(steps))*100*time.Millisecond, Kind: kind, Params: fault.Params{}, Count: 1}
	// The longest a fault may last: it ends a second before the load.
	room := sh.Duration - time.Second - f.At
	between := func(lo, hi time.Duration, step time.Duration) time.Duration {
		hi = min(hi, room)
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64((hi-lo)/step)+1))*step
	}
	switch kind {
	case fault.Restart:
		delay := time.Duration(0)
		if rng.IntN(2) == 1 {
			delay = time.Duration(rng.Int64N(int64(sh.LockTTL/(100*time.Millisecond))+1)) * 100 * time.Millisecond
		}
		f.Params["delay"] = fault.Value{D: delay}
	case fault.Partition:
		f.Params[fault.For] = fault.Value{D: between(500*time.Millisecond, 4*time.Second, 100*time.Millisecond)}
	case fault.Latency:
		add := between(5*time.Millisecond, time.Second, time.Millisecond)
		f.Params["add"] = fault.Value{D: add}
		f.Params["jitter"] = fault.Value{D: time.Duration(rng.Int64N(int64(add/2/time.Millisecond)+1)) * time.Millisecond}
		f.Params[fault.For] = fault.Value{D: between(500*time.Millisecond, 4*time.Second, 100*time.Millisecond)}
	case fault.Pause:
		f.Params[fault.For] = fault.Value{D: between(200*time.Millisecond, 3*time.Second, 100*time.Millisecond)}
	case fault.ClockJump:
		by := time.Duration(500+rng.IntN(4501)) * time.Millisecond
		if rng.IntN(4) == 0 {
			by = -by
		}
		f.Params["by"] = fault.Value{D: by}
	case fault.ClockRate:
		f.Params["factor"] = fault.Value{N: float64(50+rng.IntN(251)) / 100}
		f.Params[fault.For] = fault.Value{D: between(time.Second, 4*time.Second, 100*time.Millisecond)}
	case fault.Failover:
		f.Params["lag"] = fault.Value{D: time.Duration(rng.IntN(21)) * 100 * time.Millisecond}
	case fault.ClientPause:
		f.Count = 1 + rng.IntN(3)
		f.Params["count"] = fault.Value{N: float64(f.Count)}
		f.Params[fault.For] = fault.Value{D: between(time.Second, 3*time.Second, 100*time.Millisecond)}
		f.Scope = inventory.ScopeRequest
		return f
	}
	etcdGuards := slices.ContainsFunc(c.Guards, func(g inventory.Guard) bool { return g.NeedsEtcd() })
	if fam.Etcd && etcdGuards && c.Lab.Etcd > 0 && rng.IntN(10) < 3 {
		f.Etcd = c.drawMembers(rng)
		return f
	}
	f.Nodes = drawTargets(rng, c.Lab.Nodes)
	return f
}

// leaderOnlyWithQuorum retargets a fault aimed at the etcd leader that
// comes after faults on a majority of the members: none of them may be
// back by then, and a cluster without a quorum has no leader to aim at (the
// fault could not be applied, and the schedule would not run). Each earlier
// fault on the leader counts as one more member hit. The fault goes to the
// first member no earlier fault named instead: a draw, still the same for
// the same seed.
func leaderOnlyWithQuorum(faults []spec.Fault, members int) {
	hit := map[int]bool{}
	leaders := 0
	for i, f := range faults {
		if slices.Contains(f.Etcd, profile.Leader) && len(hit)+leaders >= members/2+1 {
			m := 1
			for m < members && hit[m] {
				m++
			}
			faults[i].Etcd = []int{m}
			f = faults[i]
		}
		for _, m := range f.Etcd {
			if m == profile.Leader {
				leaders++
			} else {
				hit[m] = true
			}
		}
	}
}

// onlyRunningNodes takes out of a fault that acts on a node's redis-server
// (a kill, a power cut, a pause, a restart) the nodes an earlier fault of
// the schedule took down and that may not be back yet: a crashed or
// powered-off node waits out the restart delay, a restarted one its own
// delay, then starts (a second allowed for it). There is no server to act
// on then, the fault could not be applied, and the schedule would not run.
// A fault left with no node is dropped; the first fault always stays.
func onlyRunningNodes(faults []spec.Fault, restartDelay time.Duration) []spec.Fault {
	downUntil := map[int]time.Duration{}
	out := faults[:0]
	for _, f := range faults {
		acts := f.Kind == fault.Kill || f.Kind == fault.PowerLoss || f.Kind == fault.Pause || f.Kind == fault.Restart
		if acts && len(f.Nodes) > 0 {
			var up []int
			for _, n := range f.Nodes {
				if f.At >= downUntil[n] {
					up = append(up, n)
				}
			}
			if len(up) == 0 {
				continue
			}
			f.Nodes = up
			var down time.Duration
			switch f.Kind {
			case fault.Kill, fault.PowerLoss:
				down = restartDelay
			case fault.Restart:
				down = f.Params["delay"].D
			case fault.Pause:
				down = f.For()
			}
			for _, n := range up {
				downUntil[n] = max(downUntil[n], f.At+down+time.Second)
			}
		}
		out = append(out, f)
	}
	return out
}

// drawTargets draws one node, a minority or a majority of n nodes, each
// as likely, then which ones.
func drawTargets(rng *rand.Rand, n int) []int {
	var size int
	switch rng.IntN(3) {
	case 0:
		size = 1
	case 1:
		size = 1 + rng.IntN(max((n-1)/2, 1)) // a minority
	default:
		size = n/2 + 1 + rng.IntN(n-n/2) // a majority
	}
	size = min(size, n)
	perm := rng.Perm(n)[:size]
	out := make([]int, size)
	for i, p := range perm {
		out[i] = p + 1
	}
	sort.Ints(out)
	return out
}

// drawMembers draws the etcd leader, one member or a majority of them.
func (c *Config) drawMembers(rng *rand.Rand) []int {
	switch rng.IntN(3) {
	case 0:
		return []int{profile.Leader}
	case 1:
		return []int{1 + rng.IntN(c.Lab.Etcd)}
	}
	perm := rng.Perm(c.Lab.Etcd)[:c.Lab.Etcd/2+1]
	out := make([]int, len(perm))
	for i, p := range perm {
		out[i] = p + 1
	}
	sort.Ints(out)
	return out
}

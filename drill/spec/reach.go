// What a drill can show of a guard: which of its faults, and which shape
// of its load, reach the guard, derived from the spec and one small table
// per guard. The matrix uses it to tell a cell a drill did not run from a
// cell its faults cannot reach, and the drill judges each guard's phases on
// the faults that reach it.

package spec

import (
	"strings"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/inventory"
)

// Reacher is a way a drill can reach a guard; a set of them is a bit mask.
type Reacher uint8

// The ways a drill reaches a guard.
const (
	// RedisNodes: a fault on the lab's Redis nodes.
	RedisNodes Reacher = 1 << iota
	// EtcdMembers: a fault on the lab's etcd members.
	EtcdMembers
	// PausedHolder: a client-pause that freezes the guard's holders.
	PausedHolder
	// OutlivedHolder: a holder that can outlive its lock while the next
	// holder holds: its longest hold plus the longest client-pause that
	// freezes it longer than the lock TTL, and a workload hold, so that the
	// next holder is still inside its critical section when the first one
	// releases (without a hold a critical section lasts milliseconds, and a
	// late release almost never meets a holder to free).
	OutlivedHolder
	// HotKey: one key takes at least HotKeyShare of the load, so that
	// requests for it meet.
	HotKey
)

// HotKeyShare is the share of the load on one key from which a drill is a
// hot-key contention drill (KeySpec.HottestShare): half of it.
const HotKeyShare = 0.5

var reacherNames = []struct {
	r    Reacher
	name string
}{
	{RedisNodes, "a fault on Redis nodes"},
	{EtcdMembers, "a fault on etcd members"},
	{PausedHolder, "a paused holder"},
	{OutlivedHolder, "a holder outliving its lock"},
	{HotKey, "a hot key"},
}

// String lists the ways, "a fault on Redis nodes, a paused holder".
func (r Reacher) String() string {
	var out []string
	for _, n := range reacherNames {
		if r&n.r != 0 {
			out = append(out, n.name)
		}
	}
	if len(out) == 0 {
		return "nothing"
	}
	return strings.Join(out, ", ")
}

// guardReach is, per guard, what reaches it (By) and beside what it runs
// as a control (Control): a guard that does not depend on what the fault
// hits, run so that a fault that leaks into it, or a machine too busy for
// the drill, shows.
//
//   - The Redis lock guards depend on the Redis nodes. The comparison
//     guards (a release by plain DEL) differ from their correct twins only
//     when a holder outlives its lock, so only that reaches them.
//   - The etcd guards depend on the etcd members, and run beside every fault
//     on Redis nodes as the control the seed's alternative is.
//   - db-atomic is the database control beside every fault on Redis nodes.
//     db-version and db-for-update are hurt by what makes requests for one
//     row meet: a hot key, or a holder frozen in its transaction.
//   - Every guard has a critical section that a client-pause freezes.
//   - none (no lock at all) loses updates under contention with no fault:
//     no drill is about it.
var guardReach = map[inventory.Guard]struct{ By, Control Reacher }{
	inventory.GuardNone:           {},
	inventory.GuardRedisSingle:    {By: RedisNodes | PausedHolder},
	inventory.GuardRedlock:        {By: RedisNodes | PausedHolder},
	inventory.GuardRedlockFenced:  {By: RedisNodes | PausedHolder},
	inventory.GuardRedsync:        {By: RedisNodes | PausedHolder},
	inventory.GuardNodeRedlock:    {By: RedisNodes | PausedHolder},
	inventory.GuardRedlockDel:     {By: OutlivedHolder},
	inventory.GuardNodeRedlockDel: {By: OutlivedHolder},
	inventory.GuardEtcd:           {By: EtcdMembers | PausedHolder, Control: RedisNodes},
	inventory.GuardEtcdFenced:     {By: EtcdMembers | PausedHolder, Control: RedisNodes},
	inventory.GuardDBAtomic:       {By: PausedHolder, Control: RedisNodes},
	inventory.GuardDBVersion:      {By: PausedHolder | HotKey},
	inventory.GuardDBForUpdate:    {By: PausedHolder | HotKey},
}

// ReachedBy is what reaches guard g in any drill (0 for a guard the table
// does not know).
func ReachedBy(g inventory.Guard) Reacher { return guardReach[g].By }

// Reach is how one drill bears on one guard.
type Reach struct {
	// By is what of the drill reaches the guard; Control what it runs
	// beside as a control. Both 0: the drill cannot reach the guard.
	By, Control Reacher
}

// Applicable reports whether the drill's faults or load reach the guard,
// or it is a control for them: whether its cell in the matrix should be
// filled.
func (r Reach) Applicable() bool { return r.By != 0 || r.Control != 0 }

// String says how: "reached by a fault on Redis nodes", "a control beside
// a fault on Redis nodes" or "not applicable".
func (r Reach) String() string {
	switch {
	case r.By != 0:
		return "reached by " + r.By.String()
	case r.Control != 0:
		return "a control beside " + r.Control.String()
	}
	return "not applicable"
}

// Reach is how the drill bears on guard g, whether it runs g or not.
func (s *Spec) Reach(g inventory.Guard) Reach {
	have := s.reachers(g)
	row := guardReach[g]
	return Reach{By: have & row.By, Control: have & row.Control}
}

// reachers is what the drill has that could reach guard g.
func (s *Spec) reachers(g inventory.Guard) Reacher {
	var have Reacher
	var paused bool
	var longest int64
	for _, f := range s.Faults {
		switch {
		case f.Kind == fault.ClientPause:
			if s.pauses(f, g) {
				paused = true
				longest = max(longest, int64(f.For()))
			}
		case len(f.Etcd) > 0:
			have |= EtcdMembers
		default:
			have |= RedisNodes
		}
	}
	if paused {
		have |= PausedHolder
	}
	if !s.Workload.Hold.IsZero() && int64(s.Workload.Hold.Max)+longest > int64(s.Workload.LockTTL) {
		have |= OutlivedHolder
	}
	if s.Workload.Keys.HottestShare() >= HotKeyShare {
		have |= HotKey
	}
	return have
}

// pauses reports whether client-pause f freezes guard g's holders, had the
// drill run g: the guards it names, or else every guard its scope can run
// (a process pause runs a guard as `redlab serve` processes, and a service
// never runs a comparison guard).
func (s *Spec) pauses(f Fault, g inventory.Guard) bool {
	if len(f.Guards) > 0 {
		return contains(f.Guards, g)
	}
	if f.Scope == inventory.ScopeProcess {
		_, err := inventory.ParseGuard(string(g))
		return err == nil
	}
	return true
}

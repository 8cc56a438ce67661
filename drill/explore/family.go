package explore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/inventory"
)

// Family is a set of fault kinds of the catalogue (package fault) that
// --faults switches on and off together, and the states its faults should
// drive a search into at least once (Properties).
type Family struct {
	Name    string
	Kinds   []fault.Kind
	Summary string
	// Etcd: the family's faults also fall on etcd members, when the etcd
	// guards run.
	Etcd bool
	// Needs says what the lab must have for the family, or "" (it is
	// checked against the profile: Check).
	Needs func(profile.Profile) string
}

// families is the catalogue of families, in the order help lists them.
var families = []Family{
	{Name: "crash", Kinds: []fault.Kind{fault.Kill, fault.Restart}, Etcd: true,
		Summary: "a server is SIGKILLed; it restarts after the restart delay (kill) or after a drawn delay, 0 included (restart)"},
	{Name: "power", Kinds: []fault.Kind{fault.PowerLoss}, Etcd: true,
		Summary: "a power cut: the server loses what it had not fsynced (the lab puts the power-loss filesystem under every node)"},
	{Name: "partition", Kinds: []fault.Kind{fault.Partition}, Etcd: true,
		Summary: "a node answers nothing for a while"},
	{Name: "latency", Kinds: []fault.Kind{fault.Latency}, Etcd: true,
		Summary: "a node's replies are delayed by up to a second"},
	{Name: "pause", Kinds: []fault.Kind{fault.Pause}, Etcd: true,
		Summary: "a server is frozen (SIGSTOP) for up to three seconds"},
	{Name: "clock", Kinds: []fault.Kind{fault.ClockJump, fault.ClockRate},
		Summary: "a node's clock steps or runs fast or slow (modelled on its keys' expiry)"},
	{Name: "client", Kinds: []fault.Kind{fault.ClientPause},
		Summary: "a lock holder freezes inside its critical section (a GC pause)"},
	{Name: "failover", Kinds: []fault.Kind{fault.Failover},
		Summary: "a node's master crashes and its asynchronous replica takes over its address",
		Needs: func(p profile.Profile) string {
			if p.Replicas == 0 {
				return "failover needs replicas: --lab '{replicas: 1}'"
			}
			return ""
		}},
}

// DefaultFamilies are the families on when --faults is not given: every
// family the default lab can apply.
var DefaultFamilies = []string{"crash", "power", "partition", "latency", "pause", "clock", "client"}

// DefaultHostFamilies are the families on when a search runs on hosts over
// SSH: those of the lab but clock, which there is a real step of the host's
// clock, asked for by name only.
var DefaultHostFamilies = []string{"crash", "power", "partition", "latency", "pause", "client"}

// FamilyNames is every family's name, for help text.
func FamilyNames() []string {
	out := make([]string, len(families))
	for i, f := range families {
		out[i] = f.Name
	}
	return out
}

// Families returns the catalogue of families.
func Families() []Family { return slices.Clone(families) }

// lookup returns the family named name.
func lookup(name string) (Family, bool) {
	for _, f := range families {
		if f.Name == name {
			return f, true
		}
	}
	return Family{}, false
}

// ParseFamilies reads a comma-separated list of family names.
func ParseFamilies(s string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if _, ok := lookup(name); !ok {
			return nil, fmt.Errorf("explore: unknown fault family %q (want some of %s)", name, strings.Join(FamilyNames(), ", "))
		}
		if slices.Contains(out, name) {
			return nil, fmt.Errorf("explore: fault family %q given twice", name)
		}
		out = append(out, name)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("explore: no fault family (want some of %s)", strings.Join(FamilyNames(), ", "))
	}
	return out, nil
}

// Property is a state a search must reach at least once, as Antithesis's
// "sometimes" assertions: when a run reaches none of the properties its
// families imply, its faults never went where the danger is, and the run
// is inconclusive.
type Property struct {
	Name string `json:"name"`
	// Why says which family implies it, and why.
	Why string `json:"why"`
	// reached judges one schedule.
	reached func(o *Outcome) bool
}

// guardHarm is a property reached when guard g shows harm in a schedule.
func guardHarm(g inventory.Guard, harm Harm) func(o *Outcome) bool {
	return func(o *Outcome) bool { return o.Guards[string(g)].Has(harm) }
}

// Properties are the states the families of c imply, given its lab and
// guards. Latency implies none: it slows a lock but breaks none, so a
// search of latency alone cannot be conclusive.
func (c *Config) Properties() []Property {
	var out []Property
	has := func(g inventory.Guard) bool { return slices.Contains(c.Guards, g) }
	on := func(name string) bool { return slices.Contains(c.Families, name) }
	ttl := c.Shape.LockTTL
	delayBelowTTL := c.Lab.NoRestartDelay || c.Lab.RestartDelay < ttl
	loses := func(ps ...profile.Persistence) bool {
		for _, p := range c.Lab.Persistence {
			if slices.Contains(ps, p) {
				return true
			}
		}
		return false
	}
	add := func(name, why string, f func(*Outcome) bool) {
		out = append(out, Property{Name: name, Why: why, reached: f})
	}
	if on("crash") {
		add("a crash while a lock was held", "crash: a node must go down under a live lock for its restart rules to matter", func(o *Outcome) bool { return o.CrashUnderLock })
		if has(inventory.GuardRedisSingle) && delayBelowTTL && c.Lab.Persistence[0] == profile.PersistNone {
			add("redis-single breaks", "crash: node 1, redis-single's only node, keeps no keys and restarts within the TTL, so a crash must hand its locks out again",
				guardHarm(inventory.GuardRedisSingle, HarmLockViolation))
		}
	}
	if on("power") {
		add("a power cut while a lock was held", "power: a node must lose power under a live lock for fsync to matter", func(o *Outcome) bool { return o.PowerUnderLock })
		if has(inventory.GuardRedlock) && delayBelowTTL && loses(profile.PersistEverysec, profile.PersistNoFsync, profile.PersistNone) {
			add("redlock breaks", "power: nodes that do not fsync every write and restart within the TTL forget granted locks; a majority of them must break Redlock",
				guardHarm(inventory.GuardRedlock, HarmLockViolation))
		}
		if has(inventory.GuardRedisSingle) && delayBelowTTL && c.Lab.Persistence[0] != profile.PersistAlways {
			add("redis-single breaks", "power: node 1 does not fsync every write and restarts within the TTL",
				guardHarm(inventory.GuardRedisSingle, HarmLockViolation))
		}
	}
	if on("partition") || on("pause") || on("crash") {
		if has(inventory.GuardRedlock) {
			add("a quorum lost", "partition, pause, crash: faults on a majority of the nodes must leave Redlock unable to grant",
				func(o *Outcome) bool { return o.Guards[string(inventory.GuardRedlock)].Unavailable > 0 })
		}
	}
	if on("clock") && has(inventory.GuardRedlock) {
		add("redlock breaks", "clock: a majority of nodes whose clocks jump past the TTL expire a granted lock early (Redis's expiry is wall-clock)",
			guardHarm(inventory.GuardRedlock, HarmLockViolation))
	}
	if on("client") {
		for _, g := range []inventory.Guard{inventory.GuardRedlock, inventory.GuardEtcd, inventory.GuardRedisSingle, inventory.GuardRedsync} {
			if has(g) {
				add("a holder outlives its lock", "client: a holder frozen past its TTL must meet the next holder (Kleppmann's GC pause)",
					guardHarm(g, HarmDoubleGrant))
				break
			}
		}
		for _, g := range []inventory.Guard{inventory.GuardRedlockFenced, inventory.GuardEtcdFenced} {
			if has(g) {
				add("a stale write fenced", "client: a fenced guard's store must turn the frozen holder's write away",
					func(o *Outcome) bool { return o.Guards[string(g)].FencedRejections > 0 })
				break
			}
		}
	}
	if on("failover") && has(inventory.GuardRedlock) {
		add("redlock breaks", "failover: a replica promoted before it received a granted lock hands it out again",
			guardHarm(inventory.GuardRedlock, HarmLockViolation))
	}
	if has(inventory.GuardRedlockDel) {
		add("redlock-del breaks", "a release by DEL deletes the next holder's key once a holder outlives its TTL",
			guardHarm(inventory.GuardRedlockDel, HarmLockViolation))
	}
	// One property may be implied by two families: keep the first.
	var uniq []Property
	for _, p := range out {
		if !slices.ContainsFunc(uniq, func(q Property) bool { return q.Name == p.Name }) {
			uniq = append(uniq, p)
		}
	}
	return uniq
}

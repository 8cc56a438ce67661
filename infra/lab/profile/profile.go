// Package profile is the lab's shape and its rules, in one type: how many
// Redis nodes and etcd members, each node's persistence, the restart delay
// after a crash, replicas, machines, SSH, TLS and the power-loss
// filesystem. A drill spec's lab: block, the flags of `redlab lab up` and
// the lab itself all hold a Profile, and one Validate judges it: its
// errors name the field (as a spec spells it), so a spec points at the
// line and the CLI at the flag.
//
// It imports nothing of the lab, so that a program writing specs (an
// explorer, a planner) does not pull in the lab's machinery.
package profile

import (
	"errors"
	"fmt"
	"time"
)

// Limits and defaults of a profile.
const (
	// MaxNodes is the largest node count the lab's port layout allows.
	MaxNodes = 99
	// MaxEtcdMembers is the largest etcd cluster a lab runs.
	MaxEtcdMembers = 5
	// MaxRestartDelay bounds the restart delay.
	MaxRestartDelay = time.Hour
	// DefaultNodes is a lab's node count when none is given.
	DefaultNodes = 5
	// DefaultRestartDelay is the delay a crashed node waits before it
	// restarts, when none is given. The Redlock page asks for "a bit more
	// than the max TTL"; it is the default lock TTL of the load generator
	// and the drills (10s) plus a margin of 2s.
	DefaultRestartDelay = 12 * time.Second
	// Leader names, among etcd members, the one leading when a fault
	// fires: members are numbered from 1, so 0 is free for it.
	Leader = 0
)

// Profile is a lab's shape. The zero value of a field takes its default
// (WithDefaults): 5 nodes, persistence always, the default restart delay.
type Profile struct {
	// Nodes is the number of Redis nodes, 1 to MaxNodes.
	Nodes int `json:"nodes"`
	// Persistence is each node's profile, in node order: one item for
	// every node, or one per node.
	Persistence []Persistence `json:"persistence"`
	// RestartDelay is how long a crashed node waits before it restarts
	// (the restart guard; at least the longest lock TTL). Zero takes the
	// default unless NoRestartDelay.
	RestartDelay time.Duration `json:"restart_delay_ns"`
	// NoRestartDelay restarts a crashed node at once: the unsafe practice
	// drills compare against. RestartDelay must then be 0.
	NoRestartDelay bool `json:"no_restart_delay,omitempty"`
	// Replicas is 0 (independent nodes, the Redlock practice) or 1: every
	// node gets an asynchronous replica that a failover promotes behind
	// the node's address (the replicas-as-nodes mistake).
	Replicas int `json:"replicas,omitempty"`
	// Machines boots every node as a systemd-nspawn machine from the
	// cloud-init user data a VM gets.
	Machines bool `json:"machines,omitempty"`
	// SSH gives every machine a network namespace and an sshd of its own,
	// so that hosts over SSH reach them as they reach VMs.
	SSH bool `json:"ssh,omitempty"`
	// TLS makes every node TLS-only.
	TLS bool `json:"tls,omitempty"`
	// Etcd is the number of etcd members next to the nodes: 0, 1, 3 or 5.
	Etcd int `json:"etcd,omitempty"`
	// EtcdUnsafeNoFsync runs the members without fsync, a declared
	// negative control.
	EtcdUnsafeNoFsync bool `json:"etcd_unsafe_no_fsync,omitempty"`
	// PowerLoss puts the power-loss filesystem (a FUSE layer that keeps
	// only what the server fsynced) under every node's and member's data
	// directory, so that power-loss faults can run. Off, the servers write
	// to plain directories, as on a real host, and a power loss is
	// refused.
	PowerLoss bool `json:"power_loss,omitempty"`
}

// Default is the profile of a lab given nothing: the documented practice
// on five independent nodes.
func Default() Profile {
	p, _ := Profile{}.WithDefaults()
	return p
}

// WithDefaults fills the zero fields with their defaults and gives every
// node its own persistence item, then validates the result.
func (p Profile) WithDefaults() (Profile, error) {
	if p.Nodes == 0 {
		p.Nodes = DefaultNodes
	}
	switch len(p.Persistence) {
	case 0:
		p.Persistence = []Persistence{PersistAlways}
	}
	if len(p.Persistence) == 1 && p.Nodes > 0 && p.Nodes <= MaxNodes {
		one := p.Persistence[0]
		p.Persistence = make([]Persistence, p.Nodes)
		for i := range p.Persistence {
			p.Persistence[i] = one
		}
	} else {
		p.Persistence = append([]Persistence(nil), p.Persistence...)
	}
	if p.RestartDelay == 0 && !p.NoRestartDelay {
		p.RestartDelay = DefaultRestartDelay
	}
	return p, p.Validate()
}

// ErrInvalid is wrapped by every *Error.
var ErrInvalid = errors.New("profile: invalid")

// Error is a profile that cannot be: Field is the field to change, spelled
// as a spec's lab: block spells it ("replicas", "restart_delay"), and Rule
// says what is wrong, as the rule.
type Error struct {
	Field string
	Rule  string
}

func (e *Error) Error() string { return e.Field + ": " + e.Rule }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *Error) Unwrap() error { return ErrInvalid }

func fail(field, format string, a ...any) error {
	return &Error{Field: field, Rule: fmt.Sprintf(format, a...)}
}

// Validate checks every rule of the lab's shape, the first broken one
// named by its field. Every place that takes a profile (a spec, the
// flags of lab up, the lab) asks it, and no other place states these
// rules.
func (p Profile) Validate() error {
	if p.Nodes < 1 || p.Nodes > MaxNodes {
		return fail("nodes", "want 1-%d nodes, got %d", MaxNodes, p.Nodes)
	}
	if n := len(p.Persistence); n != 1 && n != p.Nodes {
		return fail("persistence", "give one profile for every node or one per node (%d), got %d", p.Nodes, n)
	}
	for i, ps := range p.Persistence {
		if _, err := ParsePersistence(string(ps)); err != nil {
			return fail("persistence", "node %d: want always, everysec, no-fsync or none, got %q", i+1, ps)
		}
	}
	switch d := p.RestartDelay; {
	case d < 0:
		return fail("restart_delay", "want a delay of at least 0 (0 restarts a crashed node at once), got %v", d)
	case p.NoRestartDelay && d != 0:
		return fail("restart_delay", "a delay of %v and no restart delay at once: give one of them", d)
	case d > 0 && d < time.Millisecond:
		return fail("restart_delay", "want at least 1ms, or 0 to restart a crashed node at once, got %v", d)
	case d > MaxRestartDelay:
		return fail("restart_delay", "want at most %v, got %v", MaxRestartDelay, d)
	}
	if p.Replicas < 0 || p.Replicas > 1 {
		return fail("replicas", "want 0 (independent nodes) or 1 (an asynchronous replica per node), got %d", p.Replicas)
	}
	if p.Machines && p.Replicas > 0 {
		return fail("machines", "machines and replicas do not go together: a machine runs one redis-server under systemd; replicas need the process lab")
	}
	if p.SSH && !p.Machines {
		return fail("ssh", "SSH reaches machines in network namespaces of their own: it needs machines")
	}
	if p.Etcd != 0 && p.Etcd != 1 && p.Etcd != 3 && p.Etcd != 5 {
		return fail("etcd", "want 0 (none), 1, 3 or 5 etcd members (odd: a majority must exist), got %d", p.Etcd)
	}
	if p.Etcd > 0 && p.Machines {
		return fail("etcd", "etcd members run next to process nodes only, not with machines")
	}
	if p.EtcdUnsafeNoFsync && p.Etcd == 0 {
		return fail("etcd_unsafe_no_fsync", "the lab has no etcd members: give etcd 1, 3 or 5")
	}
	if p.TLS && (p.Replicas > 0 || p.Machines) {
		return fail("tls", "TLS goes with independent process nodes only, not with replicas (their replication links would need TLS too) or machines")
	}
	return nil
}

// Uniform is the persistence every node shares, or PersistMixed.
func (p Profile) Uniform() Persistence { return Uniform(p.Persistence) }

// Uniform is the profile every item of ps shares, or PersistMixed ("" for
// none).
func Uniform(ps []Persistence) Persistence {
	if len(ps) == 0 {
		return ""
	}
	for _, x := range ps[1:] {
		if x != ps[0] {
			return PersistMixed
		}
	}
	return ps[0]
}

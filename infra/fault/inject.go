package fault

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Injector applies the catalogue's faults on one target: a lab node
// (ProcessNode, MachineNode), an etcd member, the service process, a host
// over SSH. Everything that injects (a drill's timeline, `redlab fault`,
// `redlab fault --hosts`) goes through it.
//
// Each target has one implementation, where the fault acts: the lab's node
// supervisor for its nodes and etcd members (package node, reached through
// the supervisor's control endpoint: package lab hands out injectors that
// carry the request there), the SSH session for hosts (package hostfault),
// the drill for the service process. Each says which kinds it applies
// (Implementation), and a test holds them to the catalogue
// (CheckImplementations).
//
// A heal is a kind like any other (Heal: the partitions and latency in
// force end); the catalogue says which targets take it.
type Injector interface {
	// Apply applies kind with p, which Validate accepts for the
	// injector's target, and says what it did. An error that is the
	// fault's (a bad parameter, a kind the target does not take) matches
	// ErrInvalid or ErrUnsupported.
	Apply(ctx context.Context, kind Kind, p Params) (Result, error)
}

// InjectorFunc is a function as an Injector.
type InjectorFunc func(ctx context.Context, kind Kind, p Params) (Result, error)

// Apply calls f.
func (f InjectorFunc) Apply(ctx context.Context, kind Kind, p Params) (Result, error) {
	return f(ctx, kind, p)
}

// Result is what one fault did on its target, as every target reports
// it. Its JSON is part of a lab node's answer to a fault request.
type Result struct {
	// Kind is the fault applied.
	Kind Kind `json:"kind"`
	// ID names the fault in the record of faults (faults.jsonl); "" when
	// the request started none: a start, a heal, a partition already in
	// place, a latency of 0.
	ID string `json:"id,omitempty"`
	// Start is when the fault took effect; End when it ended, if it ended
	// before Apply returned (a clock jump, a failover).
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	// Params are the fault's parameters as recorded: those given, and
	// what the target adds (a power loss's model and what it cut, the
	// etcd member chosen as the leader).
	Params map[string]string `json:"params,omitempty"`
	// Target is the number, from 1, of the node, member or host that took
	// the fault: the member that led, for a fault on the etcd leader; 0
	// for the service process.
	Target int `json:"target,omitempty"`
	// State is the target's state once Apply returned, in its own words
	// (up, waiting, stopped); "" where the transport cannot see it (a
	// host over SSH).
	State string `json:"state,omitempty"`
	// HealsBy is when the target heals the fault by itself unless it is
	// healed first (a host's dead-man switch); zero when nothing on the
	// target waits to heal it.
	HealsBy time.Time `json:"heals_by,omitzero"`
	// What the fault did, for the kinds that say more than Params.
	PowerLoss *PowerLossResult `json:"power_loss,omitempty"`
	ClockJump *ClockJumpResult `json:"clock_jump,omitempty"`
	Failover  *FailoverResult  `json:"failover,omitempty"`
}

// PowerLossResult says what a power loss took from a node.
type PowerLossResult struct {
	// Model is how the loss was decided: "filesystem", what the server had
	// not fsynced, from its real fsync calls (the lab's power-loss
	// filesystem).
	Model string `json:"model"`
	// Persistence is the node's profile, which decides what it fsyncs:
	// always before acknowledging, everysec about once a second, no-fsync
	// and none never ("" for an etcd member).
	Persistence string `json:"persistence"`
	// CutBytes are the bytes cut off the ends of files and those written
	// back where unsynced writes had overwritten durable ones; CutCommands
	// the write commands the AOF's incr files held before the cut and not
	// after (MULTI, EXEC and SELECT are not counted), that is acknowledged
	// writes lost (etcd members: not counted).
	CutBytes    int64 `json:"cut_bytes"`
	CutCommands int64 `json:"cut_commands"`
	// CutFiles names the files that were cut back.
	CutFiles []string `json:"cut_files,omitempty"`
	// Vanished and Returned name what a cut took away (created or renamed
	// to, never made durable by a directory fsync) and gave back (unlinked
	// or renamed away, never made durable).
	Vanished []string `json:"vanished,omitempty"`
	Returned []string `json:"returned,omitempty"`
}

// ClockJumpResult says what a clock jump did to a node's keys.
type ClockJumpResult struct {
	Adjusted int64 `json:"adjusted"` // keys whose TTL moved by the jump
	Deleted  int64 `json:"deleted"`  // keys that expired because of it
}

// FailoverResult says what a failover did.
type FailoverResult struct {
	// Promoted is the server now behind the node's address.
	Promoted string `json:"promoted"`
	// Lag is how long replication was held back before the crash.
	Lag time.Duration `json:"lag"`
	// CaughtUp: before the lag began, the replica had every write the
	// master had acknowledged (only checked with a lag).
	CaughtUp bool `json:"caught_up"`
	// LostBytes is how far the replica was behind the master's replication
	// stream when the master crashed: writes that are gone (-1: unknown).
	LostBytes int64 `json:"lost_bytes"`
}

// Implementation says which kinds one target's implementation of
// Injector applies: data, so that a test can hold every target's to the
// catalogue (CheckImplementations). A kind listed twice is two
// implementations of it.
type Implementation struct {
	Target Target
	Kinds  []Kind
	// Where names the implementation in errors ("package node").
	Where string
}

// CheckImplementations walks the catalogue: every kind on every target it
// allows must have exactly one implementation among impls, and no
// implementation may apply a kind the catalogue does not give its target.
func CheckImplementations(impls ...Implementation) error {
	var errs []error
	count := map[Target]map[Kind][]string{}
	for _, im := range impls {
		if count[im.Target] == nil {
			count[im.Target] = map[Kind][]string{}
		}
		for _, k := range im.Kinds {
			count[im.Target][k] = append(count[im.Target][k], im.Where)
			if d, ok := Lookup(k); !ok || !d.Can(im.Target) {
				errs = append(errs, fmt.Errorf("fault: %s applies %s on %s, which the catalogue does not give it", im.Where, k, im.Target.plural()))
			}
		}
	}
	for _, d := range catalogue {
		for _, t := range d.Targets {
			switch where := count[t][d.Kind]; len(where) {
			case 1:
			case 0:
				errs = append(errs, fmt.Errorf("fault: %s on %s: no implementation", d.Kind, t.plural()))
			default:
				errs = append(errs, fmt.Errorf("fault: %s on %s: %d implementations (%s)", d.Kind, t.plural(), len(where), strings.Join(where, ", ")))
			}
		}
	}
	return errors.Join(errs...)
}

// Table is one target's implementation of Injector on T, the type that
// applies its faults: how T applies each kind, kept in the order given.
// The injector validates a fault (Validate) before its table applies it,
// so that an entry gets only what the catalogue allows.
type Table[T any] struct {
	Target Target
	// Where names the implementation in errors ("package node").
	Where   string
	entries []entry[T]
}

// ApplyFunc applies one kind on t.
type ApplyFunc[T any] func(t T, ctx context.Context, p Params) (Result, error)

type entry[T any] struct {
	kind Kind
	fn   ApplyFunc[T]
}

// With returns a table with fn as the implementation of kind added; a
// kind given twice is two implementations, which CheckImplementations
// refuses.
func (tb Table[T]) With(kind Kind, fn ApplyFunc[T]) Table[T] {
	tb.entries = append(slices.Clip(tb.entries), entry[T]{kind, fn})
	return tb
}

// Replace returns a table with fn instead of the implementation of kind
// it has (or with fn added).
func (tb Table[T]) Replace(kind Kind, fn ApplyFunc[T]) Table[T] {
	tb.entries = slices.Clone(tb.entries)
	for i, e := range tb.entries {
		if e.kind == kind {
			tb.entries[i].fn = fn
			return tb
		}
	}
	return tb.With(kind, fn)
}

// Implementation is what the table implements.
func (tb Table[T]) Implementation() Implementation {
	im := Implementation{Target: tb.Target, Where: tb.Where}
	for _, e := range tb.entries {
		im.Kinds = append(im.Kinds, e.kind)
	}
	return im
}

// Apply applies kind with p, validated already, on t. The result's Kind
// is kind.
func (tb Table[T]) Apply(ctx context.Context, t T, kind Kind, p Params) (Result, error) {
	for _, e := range tb.entries {
		if e.kind == kind {
			res, err := e.fn(t, ctx, p)
			res.Kind = kind
			return res, err
		}
	}
	// A kind the catalogue gives the target and the table lacks: the test
	// of implementations fails first.
	return Result{Kind: kind}, &Error{Kind: kind, Unsupported: true, Rule: fmt.Sprintf("%s has no implementation on %s (%s)", kind, tb.Target.plural(), tb.Where)}
}

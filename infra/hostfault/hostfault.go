// Package hostfault injects faults into real hosts over SSH (package
// remote), from one command table (table.go) that the runbooks show too.
//
// Every fault that leaves something to heal arms a dead-man switch on the
// host BEFORE it injects: a transient systemd timer,
// redlab-heal-<id>.timer, that runs the fault's heal script when it fires.
// A runner that heals normally disarms it; a runner that dies, or loses the
// host, leaves a host that heals itself (after ChaosBlade's --timeout and
// the rollback AWS's fault documents schedule before they inject). A power
// loss arms nothing: the reboot heals it, and takes /run with it.
//
// A Session (session.go) is the faults of one run on the hosts of an
// inventory: each host a fault target (fault.Injector, the catalogue's
// SSHHost), what each fault leaves kept until it is healed, a timed one
// healed after its `for`, a crash's end recorded when the node answers
// again. A drill on hosts and `redlab fault --hosts` both go through it.
package hostfault

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/hosts"
)

// Runner runs a script as root on one host (a *remote.Client).
type Runner interface {
	Run(ctx context.Context, script string) (string, error)
}

// Options are how a fault is injected beyond its parameters: the bounds of
// its dead-man switch, and whom a partition cuts the host off from.
type Options struct {
	// Margin is added to a timed fault's `for`: the switch fires for+Margin
	// after the injection. 0: DefaultMargin.
	Margin time.Duration
	// Horizon is when the switch fires for a fault without `for` (stop,
	// kill, restart, clock-jump, a partition healed by hand). 0: 10m.
	Horizon time.Duration
	// From are the addresses a partition cuts the host off from (IPs: the
	// addresses iptables matches); none: the clients on the Redis port.
	From []string
}

// DefaultMargin is Options.Margin unless set.
const DefaultMargin = 30 * time.Second

func (o Options) deadMan(p fault.Params) time.Duration {
	if d := p.D(fault.For); d > 0 {
		m := o.Margin
		if m <= 0 {
			m = DefaultMargin
		}
		return d + m
	}
	if o.Horizon <= 0 {
		return 10 * time.Minute
	}
	return o.Horizon
}

// NewID returns a fresh fault id: 8 hex digits, short enough for an
// iptables chain name.
func NewID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Inject arms the fault's switch and injects it on the host r reaches,
// with p its parameters (package fault's).
func Inject(ctx context.Context, r Runner, f Fault, p fault.Params, o Options) (Fault, error) {
	if f.ID == "" {
		f.ID = NewID()
	}
	dm := o.deadMan(p)
	script, err := InjectScript(f.Kind, f.ID, f.Host, p, o.From, dm)
	if err != nil {
		return f, err
	}
	spec, _ := Lookup(f.Kind)
	if c, _ := spec.commandsFor(f.Host); c.Heal != "" {
		f.DeadMan = dm
	}
	if _, err := r.Run(ctx, script); err != nil {
		err = fmt.Errorf("hostfault: %s on %s: %w", f.Kind, f.Host.Address, err)
		if f.DeadMan > 0 {
			// Undo what got in before the failure (a chain without its
			// rules, a stopped chrony) and disarm the switch, as far as the
			// host can still be reached.
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if herr := Heal(hctx, r, f); herr != nil {
				err = errors.Join(err, herr)
			}
		}
		return f, err
	}
	return f, nil
}

// Heal heals f and disarms its switch.
func Heal(ctx context.Context, r Runner, f Fault) error {
	if _, err := r.Run(ctx, HealScript(f.ID)); err != nil {
		return fmt.Errorf("hostfault: heal %s %s on %s: %w", f.Kind, f.ID, f.Host.Address, err)
	}
	return nil
}

// HealAll heals everything redlab may have left on host h, which r
// reaches, and returns what it found, one line each.
func HealAll(ctx context.Context, r Runner, h hosts.Host) (string, error) {
	out, err := r.Run(ctx, HealAllScript(h))
	if err != nil {
		return out, fmt.Errorf("hostfault: heal: %w", err)
	}
	return out, nil
}

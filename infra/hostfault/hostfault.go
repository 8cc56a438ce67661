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
package hostfault

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redlocklab/redlocklab/infra/hosts"
)

// Runner runs a script as root on one host (a *remote.Client).
type Runner interface {
	Run(ctx context.Context, script string) (string, error)
}

// Options bound the dead-man switch.
type Options struct {
	// Margin is added to a timed fault's For: the switch fires For+Margin
	// after the injection. 0: 30s.
	Margin time.Duration
	// Horizon is when the switch fires for a fault without For (stop, kill,
	// restart, clock-jump, a partition healed by hand). 0: 10m.
	Horizon time.Duration
}

func (o Options) deadMan(p Params) time.Duration {
	if p.For > 0 {
		m := o.Margin
		if m <= 0 {
			m = 30 * time.Second
		}
		return p.For + m
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

// Inject arms the fault's switch and injects it on the host r reaches.
func Inject(ctx context.Context, r Runner, f Fault, p Params, o Options) (Fault, error) {
	if f.ID == "" {
		f.ID = NewID()
	}
	dm := o.deadMan(p)
	script, err := InjectScript(f.Kind, f.ID, f.Host, p, dm)
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

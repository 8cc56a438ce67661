// Weakening a host for a drill: the runbooks' edits of a node's profile,
// applied over SSH and restored afterwards.

package hostfault

import (
	"context"
	"fmt"
	"strings"

	"github.com/redlocklab/redlocklab/infra/hosts"
)

// Weakening is one edit of a node's production profile that a drill needs.
// The edits live in /etc, not /run: they must survive the power cut the
// drill causes.
type Weakening struct {
	Name    string
	Summary string
	// Apply edits the node; Restore undoes it. Neither restarts Redis:
	// WeakenScript and RestoreScript restart it once, cleanly, after all
	// edits.
	Apply, Restore string
}

// The files the weakenings edit (infra/modules/redis-node's defaults).
const (
	confPath    = "/etc/redis/redlock.conf"
	backupPath  = "/var/lib/redlab/redlock.conf.orig"
	drillDropIn = "/etc/systemd/system/redlock-redis.service.d/drill.conf"
)

// confBackup keeps the production configuration before the first edit.
const confBackup = `mkdir -p /var/lib/redlab
[ -e ` + backupPath + ` ] || cp -p ` + confPath + ` ` + backupPath

// confRestore puts the production configuration back.
const confRestore = `if [ -e ` + backupPath + ` ]; then cp -p ` + backupPath + ` ` + confPath + ` && rm -f ` + backupPath + `; fi`

// Weakenings are the edits a drill may ask for, in the order they apply.
var Weakenings = []Weakening{
	{
		Name:    "everysec",
		Summary: "appendfsync everysec instead of always",
		Apply: confBackup + `
sed -i 's/^appendfsync always$/appendfsync everysec/' ` + confPath,
		Restore: confRestore,
	},
	{
		Name:    "no-delay",
		Summary: "no restart delay: the guard reads REDIS_GUARD_DELAY=0 from a drop-in",
		Apply: `mkdir -p ` + dir(drillDropIn) + `
printf '[Service]\nEnvironment=REDIS_GUARD_DELAY=0\n' > ` + drillDropIn + `
systemctl daemon-reload`,
		Restore: `rm -f ` + drillDropIn + `
systemctl daemon-reload`,
	},
	{
		Name:    "no-persistence",
		Summary: "no append-only file at all (efficiency-lock only)",
		Apply: confBackup + `
sed -i 's/^appendonly yes$/appendonly no/' ` + confPath,
		Restore: confRestore,
	},
}

// LookupWeakening returns the weakening called name.
func LookupWeakening(name string) (Weakening, bool) {
	for _, w := range Weakenings {
		if w.Name == name {
			return w, true
		}
	}
	return Weakening{}, false
}

// restartClean restarts Redis with a clean stop, so the guard starts it at
// once; `sync` first, so that a power cut cannot undo the edits.
const restartClean = `sync
systemctl restart ` + unit

// WeakenScript returns the script that applies the named weakenings and
// restarts Redis cleanly.
func WeakenScript(names ...string) (string, error) {
	var b strings.Builder
	b.WriteString("set -eu\n" + systemdCheck + "\n")
	for _, n := range names {
		w, ok := LookupWeakening(n)
		if !ok {
			return "", fmt.Errorf("hostfault: unknown weakening %q (want %s)", n, strings.Join(weakeningNames(), ", "))
		}
		b.WriteString(w.Apply + "\n")
	}
	b.WriteString(restartClean + "\n")
	return b.String(), nil
}

// RestoreScript returns the script that undoes every weakening, whichever
// were applied, and restarts Redis cleanly.
func RestoreScript() string {
	var b strings.Builder
	b.WriteString("set -eu\n" + systemdCheck + "\n")
	seen := map[string]bool{}
	for _, w := range Weakenings {
		if !seen[w.Restore] {
			b.WriteString(w.Restore + "\n")
			seen[w.Restore] = true
		}
	}
	b.WriteString(restartClean + "\n")
	return b.String()
}

func weakeningNames() []string {
	out := make([]string, len(Weakenings))
	for i, w := range Weakenings {
		out[i] = w.Name
	}
	return out
}

// Weaken applies the weakenings to the host r reaches. It refuses, before
// anything is sent, unless inv is marked as a drill environment.
func Weaken(ctx context.Context, inv *hosts.Inventory, r Runner, names ...string) error {
	if err := inv.CheckDrillEnvironment(); err != nil {
		return err
	}
	script, err := WeakenScript(names...)
	if err != nil {
		return err
	}
	if _, err := r.Run(ctx, script); err != nil {
		return fmt.Errorf("hostfault: weaken: %w", err)
	}
	return nil
}

// Restore undoes every weakening on the host r reaches.
func Restore(ctx context.Context, r Runner) error {
	if _, err := r.Run(ctx, RestoreScript()); err != nil {
		return fmt.Errorf("hostfault: restore: %w", err)
	}
	return nil
}

// WeakeningBlock is what the runbooks show for a weakening, between
// "<!-- hostweaken NAME -->" and "<!-- /hostweaken -->".
func WeakeningBlock(name string) (string, error) {
	w, ok := LookupWeakening(name)
	if !ok {
		return "", fmt.Errorf("hostfault: unknown weakening %q", name)
	}
	return fmt.Sprintf("# What `redlab hosts weaken --%s` runs on each VM, as root (sudo -n):\n%s\n# Restore (redlab hosts restore):\n%s\n# Both end with a clean restart, after sync:\n%s\n", w.Name, w.Apply, w.Restore, restartClean), nil
}

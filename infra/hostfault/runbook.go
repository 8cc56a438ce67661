// What the runbooks show of the table.

package hostfault

import (
	"fmt"
	"strings"

	"github.com/redlocklab/redlocklab/infra/hosts"
)

// RunbookBlock returns what a runbook's "Run it on real VMs" section shows
// for kind: the table's lines for a VM, exactly as the backend sends them.
// The runbooks hold it between "<!-- hostfault KIND -->" and
// "<!-- /hostfault -->"; TestRunbookCommands keeps the copies equal.
func RunbookBlock(kind string) (string, error) {
	spec, ok := Lookup(kind)
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrUnknownKind, kind)
	}
	c := spec.Commands[hosts.VM]
	if c.Refuse != "" {
		return "", &RefusedError{Kind: kind, Type: hosts.VM, Why: c.Refuse}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# What `redlab fault %s --hosts` runs on each VM, as root (sudo -n).\n", kind)
	if c.Heal != "" {
		b.WriteString("# First it arms the dead-man switch, which heals the fault if nobody else does:\n")
		b.WriteString("#   systemd-run --unit=redlab-heal-$ID --on-active=<length + 30s, or --dead-man> \\\n")
		b.WriteString("#     --timer-property=AccuracySec=100ms /bin/sh /run/redlab/faults/$ID.heal\n")
	}
	b.WriteString("# Inject:\n")
	b.WriteString(c.Inject + "\n")
	if c.Heal != "" {
		b.WriteString("# Heal (at the end of --hold or --for, by redlab heal --hosts, or by the switch):\n")
		b.WriteString(c.Heal + "\n")
	}
	return b.String(), nil
}

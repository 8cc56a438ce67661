// The scripts sent to a host: a fault's (arm the dead-man switch, then
// inject), a heal's (run the heal, disarm), and the heal of everything.

package hostfault

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/hosts"
)

// StateDir is where a host keeps the heal script of every fault in force;
// /run, so a reboot, which heals them all, also forgets them.
const StateDir = "/run/redlab/faults"

// HealUnitPrefix starts the name of every dead-man switch's transient
// unit: redlab-heal-<id>.timer fires redlab-heal-<id>.service.
const HealUnitPrefix = "redlab-heal-"

// Fault is one fault injected on one host, with what heals it.
type Fault struct {
	ID   string
	Kind string
	Host hosts.Host
	// DeadMan is when, after injection, the host heals it by itself; 0: no
	// switch (nothing to heal).
	DeadMan time.Duration
}

// vars returns the shell variable assignments of a fault's script: its
// parameters (package fault's), and from, the addresses a partition cuts
// the host off from (none: the clients on the Redis port).
func vars(id string, h hosts.Host, p fault.Params, from []string) ([]string, error) {
	_, port, err := net.SplitHostPort(h.Redis)
	if err != nil {
		return nil, fmt.Errorf("hostfault: host %s: redis address %q: %w", h.Address, h.Redis, err)
	}
	for _, peer := range from {
		if net.ParseIP(peer) == nil {
			return nil, fmt.Errorf("hostfault: partition peer %q: want an IP address (iptables matches addresses)", peer)
		}
	}
	kv := map[string]string{
		"ID":        id,
		"UNIT":      unit,
		"PORT":      port,
		"CHAIN":     "redlab-" + id,
		"FOR_S":     seconds(p.D(fault.For)),
		"DELAY_S":   seconds(p.D("delay")),
		"ADD_MS":    strconv.FormatInt(p.D("add").Milliseconds(), 10),
		"JITTER_MS": strconv.FormatInt(p.D("jitter").Milliseconds(), 10),
		"BY_S":      seconds(p.D("by")),
		"PEERS":     strings.Join(from, " "),
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(kv))
	for _, k := range keys {
		out = append(out, k+"="+quote(kv[k]))
	}
	return out, nil
}

func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// quote single-quotes s for the shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ifLine finds the interface of the default route, which carries the
// clients' traffic.
// A host without a default route (a lab machine of its own network
// namespace reaches only its host) uses its one interface with a global
// IPv4 address.
const ifLine = `IF=$(ip -o route show default | awk '{print $5; exit}')
[ -n "$IF" ] || IF=$(ip -o -4 addr show scope global | awk '{print $2}' | sort -u | awk 'NR == 1 {i = $1} END {if (NR == 1) print i}')
[ -n "$IF" ] || { echo "hostfault: no default route and not exactly one interface with a global address: cannot tell which interface carries the clients" >&2; exit 3; }`

// systemdCheck refuses a host whose init is not systemd: the faults act
// through its units and the dead-man switch is one of its timers.
const systemdCheck = `[ -d /run/systemd/system ] || { echo "hostfault: this host does not run systemd (no /run/systemd/system): the faults act through redlock-redis.service and arm systemd timers" >&2; exit 3; }`

// heredoc appends a here-document writing body to path (">" or ">>").
func heredoc(b *strings.Builder, redirect, path, body string) {
	fmt.Fprintf(b, "cat %s %s <<'REDLAB_EOF'\n%s\nREDLAB_EOF\n", redirect, path, strings.TrimRight(body, "\n"))
}

// InjectScript returns the script that arms the fault's dead-man switch
// (deadMan after the start) and then injects it, with p its parameters and
// from the addresses a partition cuts the host off from (none: the clients
// on the Redis port). A kind the host type refuses, or unknown, is an error
// that says why.
func InjectScript(kind, id string, h hosts.Host, p fault.Params, from []string, deadMan time.Duration) (string, error) {
	spec, ok := Lookup(kind)
	if !ok {
		return "", fmt.Errorf("%w: %q (want one of %s)", ErrUnknownKind, kind, strings.Join(Kinds(), ", "))
	}
	c, ok := spec.commandsFor(h)
	if !ok || c.Refuse != "" {
		why := c.Refuse
		if why == "" {
			why = "no commands for this host type"
		}
		return "", &RefusedError{Kind: kind, Type: h.Type, Why: why}
	}
	vs, err := vars(id, h, p, from)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("set -eu\n" + systemdCheck + "\n")
	for _, need := range append([]string{"systemd-run", "systemctl"}, spec.Needs...) {
		fmt.Fprintf(&b, "command -v %s >/dev/null || { echo 'hostfault: %s needs %s, which this host lacks' >&2; exit 3; }\n", need, kind, need)
	}
	b.WriteString(strings.Join(vs, "\n") + "\n")
	usesIF := strings.Contains(c.Inject+c.Heal, "$IF")
	if usesIF {
		b.WriteString(ifLine + "\n")
	}
	paths := make([]string, 0, len(spec.Files))
	for p := range spec.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, path := range paths {
		fmt.Fprintf(&b, "mkdir -p %s\n", quote(dir(path)))
		heredoc(&b, ">", quote(path), spec.Files[path])
	}
	if c.Heal != "" {
		// The heal script, with the variables fixed, then the switch: both
		// before the fault, so a runner that dies after the injection
		// leaves a host that heals itself.
		heal := StateDir + "/" + id + ".heal"
		fmt.Fprintf(&b, "mkdir -p %s\n", StateDir)
		heredoc(&b, ">", heal, strings.Join(vs, "\n"))
		if usesIF {
			fmt.Fprintf(&b, "echo \"IF='$IF'\" >> %s\n", heal)
		}
		heredoc(&b, ">>", heal, c.Heal+"\nrm -f \"$0\"")
		fmt.Fprintf(&b, "systemd-run --quiet --unit=%s%s --on-active=%s --timer-property=AccuracySec=100ms /bin/sh %s\n",
			HealUnitPrefix, id, onActive(deadMan), heal)
	}
	b.WriteString(c.Inject + "\n")
	return b.String(), nil
}

// onActive renders d for systemd-run's --on-active, in milliseconds.
func onActive(d time.Duration) string {
	if d < time.Second {
		d = time.Second
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

func dir(path string) string {
	if i := strings.LastIndex(path, "/"); i > 0 {
		return path[:i]
	}
	return "/"
}

// HealScript returns the script that heals fault id and disarms its switch.
// A fault already healed (by its switch, or an earlier heal) heals again
// as a no-op.
func HealScript(id string) string {
	heal := StateDir + "/" + id + ".heal"
	return fmt.Sprintf(`if [ -e %[1]s ]; then /bin/sh %[1]s; fi
systemctl stop %[2]s%[3]s.timer 2>/dev/null || true
systemctl reset-failed %[2]s%[3]s.service 2>/dev/null || true
`, heal, HealUnitPrefix, id)
}

// HealAllScript returns the script `redlab heal --hosts` runs on host h: every heal script left behind, then a sweep for anything redlab
// puts on a host (iptables chains redlab-*, netem root qdiscs, runtime
// drop-ins redlab-*.conf, a stopped or paused Redis, a stopped chrony,
// armed heal timers). A lab machine's sweep leaves the network alone, unless
// the machine has a network namespace of its own: otherwise it is its
// host's. It prints one line per thing it healed.
func HealAllScript(h hosts.Host) string {
	net := netSweep
	if h.Type == hosts.Machine && !h.OwnNetns {
		net = ""
	}
	return systemdCheck + `
for f in ` + StateDir + `/*.heal; do
  [ -e "$f" ] || continue
  echo "healed: fault $(basename "$f" .heal)"
  /bin/sh "$f"
done
for t in $(systemctl list-units --all --plain --no-legend '` + HealUnitPrefix + `*.timer' | awk '{print $1}'); do
  echo "disarmed: $t"
  systemctl stop "$t"
done
systemctl reset-failed '` + HealUnitPrefix + `*.service' 2>/dev/null || true
` + net + `if ls ` + dropInDir + `/redlab-*.conf >/dev/null 2>&1; then
  echo "healed: drop-ins $(ls ` + dropInDir + `/redlab-*.conf | tr '\n' ' ')"
  rm -f ` + dropInDir + `/redlab-*.conf
  systemctl daemon-reload
fi
if grep -q '^State:[[:space:]]*T' "/proc/$(systemctl show -p MainPID --value ` + unit + `)/status" 2>/dev/null; then
  echo "healed: ` + unit + ` was paused"
fi
systemctl kill -s SIGCONT ` + unit + ` 2>/dev/null || true
has() { [ "$(systemctl show -p LoadState --value "$1")" = loaded ]; }
if has ` + unit + ` && ! systemctl is-active --quiet ` + unit + ` && [ "$(systemctl show -p ActiveState --value ` + unit + `)" != activating ]; then
  echo "healed: started ` + unit + `"
  systemctl start --no-block ` + unit + `
fi
if has chrony && ! systemctl is-active --quiet chrony; then
  echo "healed: started chrony"
  systemctl start chrony
fi
`
}

// netSweep removes redlab's iptables chains and every netem root qdisc.
const netSweep = `if command -v iptables >/dev/null; then
  for c in $(iptables -S | awk '$1 == "-N" && $2 ~ /^redlab-/ {print $2}'); do
    echo "healed: iptables chain $c"
    iptables -D INPUT -j "$c" 2>/dev/null
    iptables -D OUTPUT -j "$c" 2>/dev/null
    iptables -F "$c"
    iptables -X "$c"
  done
fi
for dev in $(tc qdisc show 2>/dev/null | awk '$2 == "netem" && / root / {print $5}'); do
  echo "healed: netem on $dev"
  tc qdisc del dev "$dev" root
done
`

// Kinds returns the kinds of the table, in order.
func Kinds() []string {
	out := make([]string, len(Table))
	for i, s := range Table {
		out[i] = s.Kind
	}
	return out
}

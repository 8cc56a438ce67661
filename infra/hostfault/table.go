// The command table: what each fault runs on a host, to inject it and to
// heal it, by host type. It is data on purpose: the runbooks' "Run it on
// real VMs" sections show these very lines (TestRunbookCommands keeps them
// equal), and the scripts the backend sends are built from nothing else.
//
// The lines read shell variables that the script sets first from the
// fault's parameters (see Vars): ID (the fault's id), UNIT, PORT (the Redis
// port of the host's "redis" address), CHAIN, IF, FOR_S, DELAY_S, ADD_MS,
// JITTER_MS, BY_S and PEERS.

package hostfault

import (
	"strings"

	"github.com/redlocklab/redlocklab/infra/hosts"
)

// Commands is one fault on one type of host.
type Commands struct {
	// Inject runs after the heal is armed, under `set -e`.
	Inject string
	// Heal undoes it; it is idempotent and runs without `set -e`. It is what
	// the dead-man switch runs, and what a normal heal runs before it
	// disarms the switch. Empty: nothing to heal (no switch is armed).
	Heal string
	// Refuse, when set, is why this type of host cannot take the fault.
	Refuse string
}

// Spec is one kind of fault on real hosts.
type Spec struct {
	Kind string
	// Summary is one line for help text.
	Summary string
	// Needs are the programs Inject runs beyond systemd's and coreutils';
	// a host without one refuses the fault before anything changes.
	Needs []string
	// Files are placed on the host (path → content) before Inject runs.
	Files map[string]string
	// Commands by host type.
	Commands map[hosts.Type]Commands
	// Net marks a fault that acts on the host's network only: a lab
	// machine of its own network namespace (hosts.Host.OwnNetns) runs a
	// VM's commands for it, inside that namespace.
	Net bool
	// Crash marks a fault that crashes Redis: it ends when the node
	// answers again (Session).
	Crash bool
}

// commandsFor returns what the fault runs on h.
func (s Spec) commandsFor(h hosts.Host) (Commands, bool) {
	if s.Net && h.Type == hosts.Machine && h.OwnNetns {
		c, ok := s.Commands[hosts.VM]
		return c, ok
	}
	c, ok := s.Commands[h.Type]
	return c, ok
}

// unit is the systemd unit of the Redis node (infra/modules/redis-node).
const unit = "redlock-redis"

// dropInDir holds the runtime drop-ins faults and weakening add to the unit;
// /run, so a reboot drops them.
const dropInDir = "/run/systemd/system/redlock-redis.service.d"

// machinePowerRefusal says why SSH cannot cut a lab machine's power.
const machinePowerRefusal = "a lab machine shares the host's kernel, so a kernel crash inside it would crash the host: its power loss is the lab's power cut, done from the host (redlab fault power-loss N against the lab, or a drill's lab), not over SSH"

// machineNetRefusal says why a lab machine that shares its host's network
// takes no network fault over SSH. A machine of its own network namespace
// (hosts.Host.OwnNetns) takes a VM's (Spec.Net).
const machineNetRefusal = "a lab machine shares its host's network namespace (infra/machine) unless the inventory marks it own_netns (redlab lab up --machines --ssh), so iptables or netem inside it would act on the host's own network: the lab partitions and delays its nodes in their fault fronts (redlab fault without --hosts)"

// clockStepHelper is the helper the clock-jump places on the host: it steps
// CLOCK_REALTIME by BY_S seconds with clock_settime (python3 is on every
// host the redis-node user data boots: cloud-init runs on it). It refuses,
// changing nothing, in a container (systemd's /run/systemd/container, or
// /.dockerenv), whose clock is its host's, and when the process lacks
// CAP_SYS_TIME. Argument 0 only checks.
const clockStepHelper = `import os, sys, time
by = float(sys.argv[1])
for marker in ("/run/systemd/container", "/.dockerenv"):
    if os.path.exists(marker):
        sys.exit("clock-step: this host cannot step its clock: it is a container (%s exists), whose clock is its host's; a clock jump needs a VM" % marker)
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff:")]
if not caps or not (int(caps[0], 16) >> 25) & 1:
    sys.exit("clock-step: this host cannot step its clock: the process lacks CAP_SYS_TIME (a container or systemd-nspawn machine shares its host's clock); a clock jump needs a VM")
if by == 0:
    sys.exit(0)
t = time.clock_gettime(time.CLOCK_REALTIME)
time.clock_settime(time.CLOCK_REALTIME, t + by)
print("clock-step: stepped CLOCK_REALTIME by %+gs" % by)
`

// machineClockRefusal says why a lab machine's clock is not stepped.
const machineClockRefusal = "a lab machine shares its host's clock (it runs chronyd -x): stepping it would step the host's; a clock jump needs a VM (the lab models one through keys' TTLs: redlab fault clock-jump without --hosts)"

// Table is every fault the SSH backend knows, in the order help lists them.
var Table = []Spec{
	{
		Kind:    "kill",
		Summary: "SIGKILL Redis through systemd; the unit restarts it and the restart guard holds it back as in production",
		Crash:   true,
		Commands: machineKillsMain(Commands{
			Inject: `systemctl kill -s SIGKILL "$UNIT"`,
			Heal:   `systemctl start --no-block "$UNIT"`,
		}),
	},
	{
		Kind:    "restart",
		Summary: "SIGKILL Redis; the guard holds it back DELAY_S seconds instead of the rendered delay (plus the unit's RestartSec=1)",
		Crash:   true,
		Commands: machineKillsMain(Commands{
			Inject: `mkdir -p ` + dropInDir + `
printf '[Service]\nEnvironment=REDIS_GUARD_DELAY=%s\n' "$DELAY_S" > ` + dropInDir + `/redlab-$ID.conf
systemctl daemon-reload
systemctl kill -s SIGKILL "$UNIT"`,
			Heal: `rm -f ` + dropInDir + `/redlab-$ID.conf
systemctl daemon-reload
systemctl start --no-block "$UNIT"`,
		}),
	},
	{
		Kind:    "stop",
		Summary: "stop Redis cleanly (systemctl stop); it stays down until start or heal",
		Commands: both(Commands{
			Inject: `systemctl stop "$UNIT"`,
			Heal:   `systemctl start --no-block "$UNIT"`,
		}),
	},
	{
		Kind:    "start",
		Summary: "start a stopped Redis (the guard decides when it serves)",
		Commands: both(Commands{
			Inject: `systemctl start --no-block "$UNIT"`,
		}),
	},
	{
		Kind:    "pause",
		Summary: "freeze Redis (SIGSTOP) for FOR_S seconds, then SIGCONT",
		Commands: machineKillsMain(Commands{
			Inject: `systemctl kill -s SIGSTOP "$UNIT"`,
			Heal:   `systemctl kill -s SIGCONT "$UNIT"`,
		}),
	},
	{
		Kind:    "partition",
		Summary: "silence (DROP, not REJECT) between the host and the clients on the Redis port, or between the host and PEERS, in an iptables chain of its own",
		Needs:   []string{"iptables"},
		Net:     true,
		Commands: vmOnly(machineNetRefusal, Commands{
			Inject: `iptables -N "$CHAIN"
iptables -I INPUT 1 -j "$CHAIN"
iptables -I OUTPUT 1 -j "$CHAIN"
if [ -z "$PEERS" ]; then
  iptables -A "$CHAIN" ! -i lo -p tcp --dport "$PORT" -j DROP
  iptables -A "$CHAIN" ! -o lo -p tcp --sport "$PORT" -j DROP
fi
for peer in $PEERS; do
  iptables -A "$CHAIN" -s "$peer" -j DROP
  iptables -A "$CHAIN" -d "$peer" -j DROP
done`,
			Heal: `iptables -D INPUT -j "$CHAIN"
iptables -D OUTPUT -j "$CHAIN"
iptables -F "$CHAIN"
iptables -X "$CHAIN"`,
		}),
	},
	{
		Kind:    "latency",
		Summary: "delay everything the host sends on IF (its default route's interface) by ADD_MS ± JITTER_MS (tc netem)",
		Needs:   []string{"tc"},
		Net:     true,
		Commands: vmOnly(machineNetRefusal, Commands{
			Inject: `tc qdisc add dev "$IF" root netem delay "${ADD_MS}ms" "${JITTER_MS}ms"`,
			Heal:   `tc qdisc del dev "$IF" root`,
		}),
	},
	{
		Kind:    "power-loss",
		Summary: "VMs: an immediate reboot without sync (sysrq b); the reboot is the heal. Lab machines: refused (the lab cuts their power)",
		Crash:   true,
		Commands: map[hosts.Type]Commands{
			// Half a second later, from a unit of its own, so that the
			// session ends cleanly before the kernel goes. Writing to
			// /proc/sysrq-trigger works for root whatever kernel.sysrq says.
			hosts.VM:      {Inject: `systemd-run --quiet --unit="redlab-power-$ID" --on-active=500ms --timer-property=AccuracySec=100ms /bin/sh -c 'echo b > /proc/sysrq-trigger'`},
			hosts.Machine: {Refuse: machinePowerRefusal},
		},
	},
	{
		Kind:    "clock-jump",
		Summary: "step the host's wall clock by BY_S seconds (chrony stopped first, so it does not undo the step); heal starts chrony, which steps it back",
		Needs:   []string{"python3"},
		Files:   map[string]string{"/run/redlab/clock-step": clockStepHelper},
		Commands: map[hosts.Type]Commands{
			hosts.VM: {
				Inject: `python3 /run/redlab/clock-step 0
systemctl stop chrony
python3 /run/redlab/clock-step "$BY_S"`,
				Heal: `systemctl start chrony`,
			},
			hosts.Machine: {Refuse: machineClockRefusal},
		},
	},
}

// machineKillsMain is c on a VM, and on a lab machine c with its signals
// sent to the main process only: machines booted by one process share its
// cgroup on a cgroup-v1 host, so systemd in one sees the others' processes
// in its unit's cgroup, fails to signal them (they are outside its PID
// namespace) and makes systemctl kill exit 1 after signalling its own.
func machineKillsMain(c Commands) map[hosts.Type]Commands {
	m := c
	m.Inject = strings.ReplaceAll(m.Inject, "systemctl kill ", "systemctl kill --kill-who=main ")
	m.Heal = strings.ReplaceAll(m.Heal, "systemctl kill ", "systemctl kill --kill-who=main ")
	return map[hosts.Type]Commands{hosts.VM: c, hosts.Machine: m}
}

// vmOnly is c on a VM; a lab machine refuses it, saying why.
func vmOnly(why string, c Commands) map[hosts.Type]Commands {
	return map[hosts.Type]Commands{hosts.VM: c, hosts.Machine: {Refuse: why}}
}

func both(c Commands) map[hosts.Type]Commands {
	return map[hosts.Type]Commands{hosts.VM: c, hosts.Machine: c}
}

// Lookup returns the spec of kind.
func Lookup(kind string) (Spec, bool) {
	for _, s := range Table {
		if s.Kind == kind {
			return s, true
		}
	}
	return Spec{}, false
}

package fault

import (
	"fmt"
	"time"
)

// The kinds.
const (
	Kill        Kind = "kill"         // SIGKILL; ends when the node answers again
	PowerLoss   Kind = "power-loss"   // SIGKILL, what was not fsynced lost; ends when the node answers again
	Restart     Kind = "restart"      // SIGKILL, restart after delay; ends when up
	Stop        Kind = "stop"         // clean stop; ends at the next start
	Start       Kind = "start"        // starts a stopped node: ends a stop
	Pause       Kind = "pause"        // SIGSTOP; ends at SIGCONT after `for`
	Partition   Kind = "partition"    // the front answers nothing; ends at heal or after `for`
	Heal        Kind = "heal"         // ends partitions and latency
	Latency     Kind = "latency"      // the front delays replies; ends at heal, a new latency or after `for`
	ClockJump   Kind = "clock-jump"   // instantaneous
	ClockRate   Kind = "clock-rate"   // repeated jumps for `for`
	Failover    Kind = "failover"     // master SIGKILLed, replica promoted behind the node's address
	ClientPause Kind = "client-pause" // a lock holder freezes inside its critical section for `for`
)

// The parameters and their rules. Each bound that the lab, the CLI and the
// drill spec once each set on their own is one rule here, with its reason.
var (
	delay = Param{Name: "delay", Type: Duration, Required: true, Example: "0s",
		Usage: "the restart delay instead of the configured one (0 restarts at once)"}
	// add and jitter are whole milliseconds: the fault front delays in 1ms
	// steps, and a value it would truncate (500µs to nothing) is refused
	// rather than silently changed. add 0 removes the latency.
	add = Param{Name: "add", Type: Duration, Required: true, Step: time.Millisecond, Example: "200ms",
		Usage: "added delay per reply (0 removes it)"}
	jitter = Param{Name: "jitter", Type: Duration, Step: time.Millisecond, Example: "20ms",
		Usage: "± jitter on the added delay"}
	// by may be negative: a backward step is the dangerous case of the
	// Redlock debate (it lengthens every TTL on the node, so a lock outlives
	// its holder's validity; clockjump.lua adds |by| to each key's TTL). 0
	// is no step and is refused as a mistake; beyond a day either way is a
	// typo (any lock TTL is far shorter: a day already expires, or keeps,
	// every key).
	by = Param{Name: "by", Type: Duration, Required: true, NonZero: true,
		Min: Value{D: -24 * time.Hour}, Max: Value{D: 24 * time.Hour}, Example: "15s",
		Usage: "the clock's step; negative steps back and lengthens TTLs (--by=-5s)"}
	// factor 0.001..1000: 0 or below is no clock, and the model moves the
	// TTLs by (factor-1) of the real time every 100ms tick, so beyond a
	// thousandfold a tick's step exceeds any lock TTL: a typo, not a drill.
	factor = Param{Name: "factor", Type: Float, Required: true,
		Min: Value{N: 0.001}, Max: Value{N: 1000}, Example: "1.5",
		Usage: "clock speed relative to real time (1.5: 50% fast)"}
	// lag 0..1h: replication is held back by a front that buffers what the
	// master sends; an hour of writes is the most a drill means, and more
	// is a typo that would hold the fault for longer than any drill runs.
	lag = Param{Name: "lag", Type: Duration, Max: Value{D: time.Hour}, Example: "3s",
		Usage: "hold replication back this long before the crash, so the writes of the last lag are lost"}
	count = Param{Name: "count", Type: Int, Min: Value{N: 1}, Max: Value{N: 1000}, Example: "1",
		Usage: "how many lock holders freeze"}
	guards = Param{Name: "guards", Type: Names, Example: "[redlock]",
		Usage: "the guards whose holders freeze (default: every guard)"}
	scope = Param{Name: "scope", Type: Names, Example: "request",
		Usage: "request (one holder's goroutine) or process (its whole service process)"}
)

// nodes are the targets of a fault on a Redis node or an etcd member, and
// on a real host over SSH (the last, so that a lab target comes first).
var (
	anyNode    = []Target{ProcessNode, MachineNode, EtcdMember, SSHHost}
	redisNodes = []Target{ProcessNode, MachineNode, SSHHost}
)

// clockOnMachine says why a machine cannot apply a clock fault.
func clockOnMachine(k Kind) func(Params) string {
	return func(Params) string {
		return fmt.Sprintf("%s models the clock through keys' TTLs, and a machine's clock is the host's (chronyd -x): run it on the process lab", k)
	}
}

// catalogue is every kind. The order is the order of help text.
var catalogue = []Def{
	{Kind: Kill, Summary: "SIGKILL the server; it restarts after the restart delay",
		Nodes: true, Targets: anyNode, Ends: "when the node answers again"},
	{Kind: PowerLoss, Summary: "crash the node losing what it had not fsynced (from its real fsync calls: always loses nothing)",
		Nodes: true, Targets: anyNode, Ends: "when the node answers again"},
	{Kind: Restart, Summary: "SIGKILL the server and restart it after delay (0: at once)",
		Params: []Param{delay}, Nodes: true, Targets: anyNode, Ends: "when it is up again",
		Refuse: map[Target]func(Params) string{MachineNode: func(p Params) string {
			if p.D("delay") != 0 {
				return "on a machine restart is `systemctl restart`, which starts at once: only delay 0 (kill waits the restart delay)"
			}
			return ""
		}}},
	{Kind: Stop, Summary: "shut the server down cleanly (SIGTERM); it stays down",
		Nodes: true, Targets: anyNode, HealedBy: Start, Ends: "at the next start"},
	{Kind: Start, Summary: "start a stopped node again",
		Nodes: true, Targets: anyNode},
	{Kind: Pause, Summary: "SIGSTOP the server for `for` (returns at once)",
		For: ForLasts, Nodes: true, Targets: anyNode, Ends: "after for"},
	{Kind: Partition, Summary: "the node's front answers nothing: clients time out",
		For: ForEnds, Nodes: true, Targets: anyNode, HealedBy: Heal, Ends: "at heal, or after for"},
	{Kind: Heal, Summary: "remove partitions and latency (all nodes by default)",
		Nodes: true, NodesOptional: true, Targets: anyNode},
	{Kind: Latency, Summary: "delay every reply by add ± jitter (add 0 removes it)",
		Params: []Param{add, jitter}, For: ForEnds, Nodes: true, Targets: anyNode, HealedBy: Heal, Ends: "at heal, a new latency, or after for"},
	{Kind: ClockJump, Summary: "model the node's clock stepping by `by`: every key's TTL shortens by it (negative: lengthens)",
		Params: []Param{by}, Nodes: true, Targets: []Target{ProcessNode, SSHHost}, Ends: "at once"},
	{Kind: ClockRate, Summary: "model the node's clock running factor times real speed for `for`",
		Params: []Param{factor}, For: ForLasts, Nodes: true, Targets: []Target{ProcessNode}, Ends: "after for"},
	{Kind: Failover, Summary: "crash the node's master and promote its replica behind the node's address (labs with replicas)",
		Params: []Param{lag}, Nodes: true, NeedsReplicas: true, Targets: []Target{ProcessNode},
		Ends: "when the promoted replica answers as master"},
	{Kind: ClientPause, Summary: "a lock holder freezes inside its critical section for `for`",
		Params: []Param{guards, count, scope}, For: ForLasts, Targets: []Target{ServiceProcess}, Ends: "after for"},
}

// unsupportedOn gives the reasons of kinds a target cannot apply at all,
// when the generic "does not apply" would not say why.
var unsupportedOn = map[Kind]map[Target]func(Params) string{
	ClockJump: {MachineNode: clockOnMachine(ClockJump)},
	ClockRate: {MachineNode: clockOnMachine(ClockRate), SSHHost: func(Params) string {
		return "clock-rate models a fast clock through keys' TTLs, in the lab; on a real host, clock-jump steps the clock for real"
	}},
	Failover: {
		MachineNode: func(Params) string { return "failover needs replicas, which a lab of machines does not have" },
		SSHHost: func(Params) string {
			return "failover promotes the lab's replicas; on real hosts it is your provider's or Sentinel's (runbooks/drills/replicas-as-nodes.md)"
		},
	},
}

package node

import (
	"context"
	"maps"

	"github.com/redlocklab/redlocklab/infra/fault"
)

// The three fault targets the lab's supervisors are, each one table
// (fault.Table), served by the supervisor's control endpoint: a process
// node, a machine node and an etcd member. The kinds every daemon applies
// the same way (daemonFaults, faults.go) are in all three; a process node
// adds the clock models and failover, a machine node crashes, stops and
// starts its redis-server through the machine's systemd (machine.go).

// daemonTable is the table of target with daemonFaults, each applied on
// the daemon of the K it is given.
func daemonTable[K any](target fault.Target, daemonOf func(K) *daemon) fault.Table[K] {
	tb := fault.Table[K]{Target: target, Where: "package node (" + target.String() + "s)"}
	for _, e := range daemonFaults {
		tb = tb.With(e.kind, func(k K, ctx context.Context, p fault.Params) (fault.Result, error) {
			return e.fn(daemonOf(k), ctx, p)
		})
	}
	return tb
}

func nodeDaemonOf(s *supervisor) *daemon     { return &s.daemon }
func etcdDaemonOf(s *etcdSupervisor) *daemon { return &s.daemon }

var (
	processFaults = daemonTable(fault.ProcessNode, nodeDaemonOf).
			With(fault.ClockJump, (*supervisor).clockJump).
			With(fault.ClockRate, (*supervisor).clockRate).
			With(fault.Failover, (*supervisor).failover)
	machineFaults = daemonTable(fault.MachineNode, nodeDaemonOf).
			Replace(fault.PowerLoss, (*supervisor).machinePowerLoss).
			Replace(fault.Restart, (*supervisor).machineRestart).
			Replace(fault.Stop, (*supervisor).machineStop).
			Replace(fault.Start, (*supervisor).machineStart)
	etcdFaults = daemonTable(fault.EtcdMember, etcdDaemonOf)
)

// Implementations are the lab's three fault targets' implementations: a
// process node's, a machine node's and an etcd member's, for the test
// that holds every target's to the catalogue (fault.CheckImplementations).
func Implementations() []fault.Implementation {
	return []fault.Implementation{processFaults.Implementation(), machineFaults.Implementation(), etcdFaults.Implementation()}
}

// Apply applies a fault of the catalogue on the node, as its control
// endpoint serves it (fault.Injector): a process node's or a machine
// node's, as the node is. The fault is judged first (CheckFault).
func (s *supervisor) Apply(ctx context.Context, kind fault.Kind, p fault.Params) (fault.Result, error) {
	target, tb := fault.ProcessNode, processFaults
	if s.mach != nil {
		target, tb = fault.MachineNode, machineFaults
	}
	if err := CheckFault(kind, p, target, s.rep != nil); err != nil {
		return fault.Result{Kind: kind}, err
	}
	return tb.Apply(ctx, s, kind, p)
}

// Apply applies a fault of the catalogue on the member, as its control
// endpoint serves it (fault.Injector).
func (s *etcdSupervisor) Apply(ctx context.Context, kind fault.Kind, p fault.Params) (fault.Result, error) {
	if err := CheckFault(kind, p, fault.EtcdMember, false); err != nil {
		return fault.Result{Kind: kind}, err
	}
	return etcdFaults.Apply(ctx, s, kind, p)
}

var (
	_ fault.Injector = (*supervisor)(nil)
	_ fault.Injector = (*etcdSupervisor)(nil)
)

// recorded is the result of a fault that started f (nil: none).
func recorded(f *Fault) fault.Result {
	if f == nil {
		return fault.Result{}
	}
	return fault.Result{ID: f.ID, Start: f.Start, End: f.End, Params: f.Params}
}

// noteKey keys a request's notes in its context.
type noteKey struct{}

// withNote returns ctx whose faults record name: value with their params:
// "target": "leader" when the lab chose the etcd member because it led.
func withNote(ctx context.Context, name, value string) context.Context {
	n := maps.Clone(notesOf(ctx))
	if n == nil {
		n = map[string]string{}
	}
	n[name] = value
	return context.WithValue(ctx, noteKey{}, n)
}

func notesOf(ctx context.Context) map[string]string {
	n, _ := ctx.Value(noteKey{}).(map[string]string)
	return n
}

// notes are the params a fault started under ctx begins with: its
// request's notes, in a map of its own.
func notes(ctx context.Context) map[string]string {
	n := maps.Clone(notesOf(ctx))
	if n == nil {
		n = map[string]string{}
	}
	return n
}

package lab

import (
	"context"
	"fmt"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/node"
)

// Status returns every node's status. A node whose supervisor does not
// answer is reported NodeDown with what its last status file said.
func (l *Lab) Status(ctx context.Context) ([]NodeStatus, error) {
	out := make([]NodeStatus, 0, len(l.f.Endpoints))
	for _, n := range l.f.Endpoints {
		var st NodeStatus
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		err := control(n).Status(sctx, &st)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			st = node.LastStatus(l.stateDir, n.ID)
			st.ID, st.State, st.SupervisorPID, st.RedisPID = n.ID, node.Down, 0, 0
			if st.Persistence == "" && n.ID <= len(l.f.Persistence) {
				st.Persistence = l.f.Persistence[n.ID-1]
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// NodeStatus returns one node's status from its supervisor.
func (l *Lab) NodeStatus(ctx context.Context, id int) (NodeStatus, error) {
	n, err := l.node(id)
	if err != nil {
		return NodeStatus{}, err
	}
	var st NodeStatus
	return st, control(n).Status(ctx, &st)
}

// Kill SIGKILLs node id's redis-server: a crash. Its supervisor restarts it
// through the restart guard, so it answers again only after the restart
// delay. Kill returns once the process is gone.
func (l *Lab) Kill(ctx context.Context, id int) (FaultResult, error) {
	return l.fault(ctx, id, fault.Kill, nil)
}

// PowerLoss cuts node id's power: a crash that also loses what the node had
// not fsynced. With appendfsync always nothing acknowledged is lost; with
// everysec the AOF is cut back to its size one second before the crash
// (the result says how many bytes and commands); with persistence none
// every key is lost, as after any restart. The node then restarts like
// after Kill, through the restart guard and its delay. PowerLoss returns
// once the AOF is cut; the fault ends when the node answers again.
func (l *Lab) PowerLoss(ctx context.Context, id int) (FaultResult, error) {
	if err := l.checkPowerLoss(); err != nil {
		return FaultResult{}, err
	}
	return l.fault(ctx, id, fault.PowerLoss, nil)
}

// checkPowerLoss refuses a power loss on a lab whose nodes and members
// run on plain data directories, before anything is sent.
func (l *Lab) checkPowerLoss() error {
	if !l.f.PowerLoss {
		return fmt.Errorf("lab: power-loss: %w: %w; bring the lab up with the power-loss filesystem (lab up --power-loss; a drill that cuts power does this itself)", ErrInvalid, node.ErrPlainDisk)
	}
	return nil
}

// Restart crashes node id like Kill, but the restart waits delay instead of
// the configured restart delay (0: restart at once, the unsafe practice).
// A stopped node is started after delay.
func (l *Lab) Restart(ctx context.Context, id int, delay time.Duration) (FaultResult, error) {
	return l.Apply(ctx, id, fault.Restart, fault.Params{"delay": {D: delay}})
}

// Stop shuts node id's redis-server down cleanly (SIGTERM: the AOF is
// fsynced) and keeps it down until Start. It returns once it is down.
func (l *Lab) Stop(ctx context.Context, id int) (FaultResult, error) {
	return l.fault(ctx, id, fault.Stop, nil)
}

// Start starts a stopped node and returns once it answers. After a clean
// stop the restart guard does not delay it.
func (l *Lab) Start(ctx context.Context, id int) (FaultResult, error) {
	return l.fault(ctx, id, fault.Start, nil)
}

// Pause SIGSTOPs node id's redis-server for d, after which its supervisor
// continues it. It returns at once.
func (l *Lab) Pause(ctx context.Context, id int, d time.Duration) (FaultResult, error) {
	return l.Apply(ctx, id, fault.Pause, fault.Params{fault.For: {D: d}})
}

// Partition cuts the nodes off: their proxies keep accepting connections
// and bytes but nothing passes, so clients time out (not refused).
func (l *Lab) Partition(ctx context.Context, ids ...int) error {
	if len(ids) == 0 {
		return fmt.Errorf("%w: partition needs at least one node", ErrInvalid)
	}
	for _, id := range ids {
		if _, err := l.fault(ctx, id, fault.Partition, nil); err != nil {
			return err
		}
	}
	return nil
}

// Heal removes every network fault (partition and latency) from the nodes,
// or from every node when ids is empty.
func (l *Lab) Heal(ctx context.Context, ids ...int) error {
	if len(ids) == 0 {
		for _, n := range l.f.Endpoints {
			ids = append(ids, n.ID)
		}
	}
	for _, id := range ids {
		if _, err := l.fault(ctx, id, fault.Heal, nil); err != nil {
			return err
		}
	}
	return nil
}

// Latency delays every reply of node id by add ± jitter; add 0 removes it.
func (l *Lab) Latency(ctx context.Context, id int, add, jitter time.Duration) (FaultResult, error) {
	return l.Apply(ctx, id, fault.Latency, fault.Params{"add": {D: add}, "jitter": {D: jitter}})
}

// ClockJump models a step of node id's wall clock by `by`: Redis keeps
// expiry as absolute wall-clock time, so for keys a forward step is every
// TTL shortened by `by`, and keys with `by` or less left expire. It is a
// model (TIME does not move); the runbook gives the real-VM command.
func (l *Lab) ClockJump(ctx context.Context, id int, by time.Duration) (FaultResult, error) {
	return l.Apply(ctx, id, fault.ClockJump, fault.Params{"by": {D: by}})
}

// ClockRate models node id's clock running factor times real speed for d,
// as repeated small clock jumps. It returns at once.
func (l *Lab) ClockRate(ctx context.Context, id int, factor float64, d time.Duration) (FaultResult, error) {
	return l.Apply(ctx, id, fault.ClockRate, fault.Params{"factor": {N: factor}, fault.For: {D: d}})
}

// Failover crashes node id's master (SIGKILL), promotes its replica
// (REPLICAOF NO ONE) and points the node's front at it, so clients keep the
// node's address, as behind Sentinel or a managed endpoint. With lag > 0
// replication is held back for lag first (the replica's link front stops
// forwarding), so what was written in the last lag before the crash is
// certainly lost. The lab must have replicas (Config.Replicas 1). It
// returns, and the fault ends, once the promoted replica answers as master
// through the node's address, logged in as any of the lab's users; the
// crashed process comes back after the restart delay as its replica.
func (l *Lab) Failover(ctx context.Context, id int, lag time.Duration) (FaultResult, error) {
	return l.Apply(ctx, id, fault.Failover, fault.Params{"lag": {D: lag}})
}

// Apply injects a fault of the catalogue (package fault) into node id: kind
// with params, as data, for callers that hold faults as data (a drill's
// timeline, the CLI). The fault methods above are Apply's kinds with typed
// arguments. The params are validated first as the node can apply them (a
// machine node, a replica): an error there is ErrInvalid (or
// ErrUnsupported on a machine), as the supervisor would answer, with
// nothing sent.
func (l *Lab) Apply(ctx context.Context, id int, kind fault.Kind, params fault.Params) (FaultResult, error) {
	if kind == fault.PowerLoss {
		if err := l.checkPowerLoss(); err != nil {
			return FaultResult{}, err
		}
	}
	target := fault.ProcessNode
	if l.f.Machines {
		target = fault.MachineNode
	}
	// Whether the node has a replica its supervisor knows best: it judges
	// that part.
	body, err := requestOf(kind, params, target, true)
	if err != nil {
		return FaultResult{}, fmt.Errorf("lab: %s node %d: %w", kind, id, err)
	}
	return l.fault(ctx, id, kind, body)
}

// requestOf validates params of kind for target (CheckFault, as the
// supervisor does) and returns the control endpoint's request: the params
// the target sees.
func requestOf(kind fault.Kind, params fault.Params, target fault.Target, replicas bool) (fault.Params, error) {
	if err := node.CheckFault(kind, params, target, replicas); err != nil {
		return nil, err
	}
	d, _ := fault.Lookup(kind)
	return d.Sent(params), nil
}

// Faults returns the faults recorded so far.
func (l *Lab) Faults() ([]Fault, error) { return node.ReadFaults(l.stateDir) }

// fault sends a fault request with p (nil: none).
func (l *Lab) fault(ctx context.Context, id int, kind FaultKind, p fault.Params) (FaultResult, error) {
	n, err := l.node(id)
	if err != nil {
		return FaultResult{}, err
	}
	var res FaultResult
	if err := control(n).Fault(ctx, kind, p, &res); err != nil {
		return FaultResult{}, fmt.Errorf("lab: %s node %d: %w", kind, id, err)
	}
	return res, nil
}

// Injector is node id as a fault target: Apply, with its result as the
// catalogue says it (fault.Injector), for callers that apply faults on any
// target (a drill's timeline, the CLI). The node's supervisor applies the
// fault (package node); this carries it to its control endpoint.
func (l *Lab) Injector(id int) fault.Injector {
	return fault.InjectorFunc(func(ctx context.Context, kind fault.Kind, p fault.Params) (fault.Result, error) {
		res, err := l.Apply(ctx, id, kind, p)
		return res.Result, err
	})
}

// control is the client of node n's control endpoint.
func control(n Node) node.Control {
	return node.Control{Addr: n.Control, What: fmt.Sprintf("node %d", n.ID)}
}

package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
)

var controlClient = &http.Client{Timeout: 2 * time.Minute}

// Status returns every node's status. A node whose supervisor does not
// answer is reported NodeDown with what its last status file said.
func (l *Lab) Status(ctx context.Context) ([]NodeStatus, error) {
	out := make([]NodeStatus, 0, len(l.f.Nodes))
	for _, n := range l.f.Nodes {
		var st NodeStatus
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		err := l.do(sctx, n, http.MethodGet, "/v1/status", nil, &st)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			_ = readJSONFile(nodeDir(l.stateDir, n.ID)+"/"+statusFile, &st)
			st.ID, st.State, st.SupervisorPID, st.RedisPID = n.ID, NodeDown, 0, 0
			if st.Persistence == "" && n.ID <= len(l.f.NodePersistence) {
				st.Persistence = l.f.NodePersistence[n.ID-1]
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
	return st, l.do(ctx, n, http.MethodGet, "/v1/status", nil, &st)
}

// Kill SIGKILLs node id's redis-server: a crash. Its supervisor restarts it
// through the restart guard, so it answers again only after the restart
// delay. Kill returns once the process is gone.
func (l *Lab) Kill(ctx context.Context, id int) (FaultResult, error) {
	return l.fault(ctx, id, FaultKill, nil)
}

// PowerLoss cuts node id's power: a crash that also loses what the node had
// not fsynced. With appendfsync always nothing acknowledged is lost; with
// everysec the AOF is cut back to its size one second before the crash
// (the result says how many bytes and commands); with persistence none
// every key is lost, as after any restart. The node then restarts like
// after Kill, through the restart guard and its delay. PowerLoss returns
// once the AOF is cut; the fault ends when the node answers again.
func (l *Lab) PowerLoss(ctx context.Context, id int) (FaultResult, error) {
	return l.fault(ctx, id, FaultPowerLoss, nil)
}

// Restart crashes node id like Kill, but the restart waits delay instead of
// the configured restart delay (0: restart at once, the unsafe practice).
// A stopped node is started after delay.
func (l *Lab) Restart(ctx context.Context, id int, delay time.Duration) (FaultResult, error) {
	return l.Apply(ctx, id, FaultRestart, fault.Params{"delay": {D: delay}})
}

// Stop shuts node id's redis-server down cleanly (SIGTERM: the AOF is
// fsynced) and keeps it down until Start. It returns once it is down.
func (l *Lab) Stop(ctx context.Context, id int) (FaultResult, error) {
	return l.fault(ctx, id, FaultStop, nil)
}

// Start starts a stopped node and returns once it answers. After a clean
// stop the restart guard does not delay it.
func (l *Lab) Start(ctx context.Context, id int) (FaultResult, error) {
	return l.fault(ctx, id, fault.Start, nil)
}

// Pause SIGSTOPs node id's redis-server for d, after which its supervisor
// continues it. It returns at once.
func (l *Lab) Pause(ctx context.Context, id int, d time.Duration) (FaultResult, error) {
	return l.Apply(ctx, id, FaultPause, fault.Params{fault.For: {D: d}})
}

// Partition cuts the nodes off: their proxies keep accepting connections
// and bytes but nothing passes, so clients time out (not refused).
func (l *Lab) Partition(ctx context.Context, ids ...int) error {
	if len(ids) == 0 {
		return fmt.Errorf("%w: partition needs at least one node", ErrInvalid)
	}
	for _, id := range ids {
		if _, err := l.fault(ctx, id, FaultPartition, nil); err != nil {
			return err
		}
	}
	return nil
}

// Heal removes every network fault (partition and latency) from the nodes,
// or from every node when ids is empty.
func (l *Lab) Heal(ctx context.Context, ids ...int) error {
	if len(ids) == 0 {
		for _, n := range l.f.Nodes {
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
	return l.Apply(ctx, id, FaultLatency, fault.Params{"add": {D: add}, "jitter": {D: jitter}})
}

// ClockJump models a step of node id's wall clock by `by`: Redis keeps
// expiry as absolute wall-clock time, so for keys a forward step is every
// TTL shortened by `by`, and keys with `by` or less left expire. It is a
// model (TIME does not move); the runbook gives the real-VM command.
func (l *Lab) ClockJump(ctx context.Context, id int, by time.Duration) (FaultResult, error) {
	return l.Apply(ctx, id, FaultClockJump, fault.Params{"by": {D: by}})
}

// ClockRate models node id's clock running factor times real speed for d,
// as repeated small clock jumps. It returns at once.
func (l *Lab) ClockRate(ctx context.Context, id int, factor float64, d time.Duration) (FaultResult, error) {
	return l.Apply(ctx, id, FaultClockRate, fault.Params{"factor": {N: factor}, fault.For: {D: d}})
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
	return l.Apply(ctx, id, FaultFailover, fault.Params{"lag": {D: lag}})
}

// Apply injects a fault of the catalogue (package fault) into node id: kind
// with params, as data, for callers that hold faults as data (a drill's
// timeline, the CLI). The fault methods above are Apply's kinds with typed
// arguments. The params are validated first as the node can apply them (a
// machine node, a replica): an error there is ErrInvalid (or
// ErrUnsupported on a machine), as the supervisor would answer, with
// nothing sent.
func (l *Lab) Apply(ctx context.Context, id int, kind fault.Kind, params fault.Params) (FaultResult, error) {
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

// requestOf validates params of kind for target (checkFault, as the
// supervisor does) and returns the control endpoint's request: the params
// the target sees, whose JSON is a faultRequest (the catalogue's parameter
// names are its fields).
func requestOf(kind fault.Kind, params fault.Params, target fault.Target, replicas bool) (fault.Params, error) {
	if err := checkFault(string(kind), params, target, replicas); err != nil {
		return nil, err
	}
	d, _ := fault.Lookup(kind)
	return d.Sent(params), nil
}

// Faults returns the faults recorded so far.
func (l *Lab) Faults() ([]Fault, error) { return ReadFaults(l.stateDir) }

// fault sends a fault request with body, the fault.Params of one (nil:
// none).
func (l *Lab) fault(ctx context.Context, id int, kind FaultKind, body any) (FaultResult, error) {
	n, err := l.node(id)
	if err != nil {
		return FaultResult{}, err
	}
	if body == nil {
		body = fault.Params{} // the endpoint reads a JSON object
	}
	var res FaultResult
	if err := l.do(ctx, n, http.MethodPost, "/v1/faults/"+string(kind), body, &res); err != nil {
		return FaultResult{}, fmt.Errorf("lab: %s node %d: %w", kind, id, err)
	}
	return res, nil
}

// do calls a node's control endpoint. Errors the supervisor reports keep
// their identity (ErrNotRunning, ErrInvalid, ErrUnsupported).
func (l *Lab) do(ctx context.Context, n Node, method, path string, body, out any) error {
	return call(ctx, fmt.Sprintf("node %d", n.ID), n.Control, method, path, body, out)
}

// call calls the control endpoint at control ("127.0.0.1:7301") of what
// ("node 1", "etcd member 2").
func call(ctx context.Context, what, control, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+control+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := controlClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s control endpoint %s (is the supervisor running? see `redlab lab status`): %w", what, control, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var eb errorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
			return fmt.Errorf("%s: %s: %s", what, resp.Status, bytes.TrimSpace(b))
		}
		switch eb.Code {
		case "not_running":
			return &remoteError{msg: eb.Error, is: ErrNotRunning}
		case "invalid":
			return &remoteError{msg: eb.Error, is: ErrInvalid}
		case "unsupported":
			return &remoteError{msg: eb.Error, is: ErrUnsupported}
		}
		return errors.New(eb.Error)
	}
	return json.Unmarshal(b, out)
}

// remoteError is an error reported by a supervisor, keeping the identity
// of the sentinel it wrapped there.
type remoteError struct {
	msg string
	is  error
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Is(target error) bool { return target == e.is }

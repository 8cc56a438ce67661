package node_test

import (
	"context"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/fault"
	"path/filepath"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/faultcheck"
)

// runTestSupervisor runs spec's supervisor in this process and returns a
// client for it; the supervisor is stopped at cleanup.
func runTestSupervisor(t *testing.T, spec node.Spec) *inproc {
	t.Helper()
	faultcheck.RunSupervisor(t, spec)
	return &inproc{spec: spec}
}

// inproc is a client of one supervisor run in this process, with the
// lab's fault API (faultcheck.Lab) for its one node.
type inproc struct{ spec node.Spec }

var _ faultcheck.Lab = (*inproc)(nil)

func (l *inproc) control() node.Control {
	return node.Control{Addr: fmt.Sprintf("127.0.0.1:%d", l.spec.ControlPort), What: fmt.Sprintf("node %d", l.spec.ID)}
}

func (l *inproc) fault(ctx context.Context, kind node.FaultKind, body fault.Params) (node.FaultResult, error) {
	var res node.FaultResult
	err := l.control().Fault(ctx, kind, body, &res)
	return res, err
}

// apply sends kind with params as the lab's client does: what the catalogue
// sends of them (a zero latency included).
func (l *inproc) apply(ctx context.Context, kind node.FaultKind, params fault.Params) (node.FaultResult, error) {
	d, ok := fault.Lookup(kind)
	if !ok {
		return node.FaultResult{}, fmt.Errorf("unknown fault %q", kind)
	}
	return l.fault(ctx, kind, d.Sent(params))
}

// addr is the node's front.
func (l *inproc) addr() string { return fmt.Sprintf("127.0.0.1:%d", l.spec.Port) }

func (l *inproc) StateDir() string { return l.spec.StateDir }

func (l *inproc) Credentials() (node.Credentials, error) {
	return node.ReadCredentials(filepath.Join(l.spec.StateDir, node.CredentialsFile))
}

func (l *inproc) NodeStatus(ctx context.Context, id int) (node.Status, error) {
	var st node.Status
	return st, l.control().Status(ctx, &st)
}

func (l *inproc) Faults() ([]node.Fault, error) { return node.ReadFaults(l.spec.StateDir) }

func (l *inproc) Kill(ctx context.Context, id int) (node.FaultResult, error) {
	return l.fault(ctx, fault.Kill, nil)
}

func (l *inproc) PowerLoss(ctx context.Context, id int) (node.FaultResult, error) {
	return l.fault(ctx, fault.PowerLoss, nil)
}

func (l *inproc) Restart(ctx context.Context, id int, delay time.Duration) (node.FaultResult, error) {
	return l.apply(ctx, fault.Restart, fault.Params{"delay": {D: delay}})
}

func (l *inproc) Stop(ctx context.Context, id int) (node.FaultResult, error) {
	return l.fault(ctx, fault.Stop, nil)
}

func (l *inproc) Start(ctx context.Context, id int) (node.FaultResult, error) {
	return l.fault(ctx, fault.Start, nil)
}

func (l *inproc) Pause(ctx context.Context, id int, d time.Duration) (node.FaultResult, error) {
	return l.apply(ctx, fault.Pause, fault.Params{fault.For: {D: d}})
}

func (l *inproc) Partition(ctx context.Context, ids ...int) error {
	_, err := l.fault(ctx, fault.Partition, nil)
	return err
}

func (l *inproc) Heal(ctx context.Context, ids ...int) error {
	_, err := l.fault(ctx, fault.Heal, nil)
	return err
}

func (l *inproc) Latency(ctx context.Context, id int, add, jitter time.Duration) (node.FaultResult, error) {
	return l.apply(ctx, fault.Latency, fault.Params{"add": {D: add}, "jitter": {D: jitter}})
}

func (l *inproc) ClockJump(ctx context.Context, id int, by time.Duration) (node.FaultResult, error) {
	return l.apply(ctx, fault.ClockJump, fault.Params{"by": {D: by}})
}

func (l *inproc) ClockRate(ctx context.Context, id int, factor float64, d time.Duration) (node.FaultResult, error) {
	return l.apply(ctx, fault.ClockRate, fault.Params{"factor": {N: factor}, fault.For: {D: d}})
}

func (l *inproc) Failover(ctx context.Context, id int, lag time.Duration) (node.FaultResult, error) {
	return l.apply(ctx, fault.Failover, fault.Params{"lag": {D: lag}})
}

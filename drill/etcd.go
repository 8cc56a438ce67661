package drill

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/redlocklab/redlocklab/drill/spec"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
	"github.com/redlocklab/redlocklab/inventory"
)

// etcd in a drill: the lab's etcd members (lab: {etcd: 3}), the etcd
// guards' endpoints, and faults on members instead of Redis nodes:
//
//	- {at: 8s, fault: kill, etcd: leader}        # the member leading when the fault fires
//	- {at: 8s, fault: stop, etcd: [1, 2]}        # members numbered from 1
//	- {at: 18s, fault: partition, etcd: leader, for: 4s}
//
// A fault names nodes or etcd, not both. The history's fault record of a
// member's fault carries etcd_member (and target "leader" when the leader
// was chosen at the fault's start) instead of nodes.

// etcdPortStep is how far apart freeBasePort tries the base ports of a
// lab with etcd members, whose ranges reach base+1000+M: two steps of a
// lab without them, so that the two kinds of lab keep their alignment.
const etcdPortStep = 1200

// etcdEndpoints are the client URLs guard g gets: the lab's members for
// the etcd guards, none for the others.
func etcdEndpoints(l interface{ EtcdEndpoints() []string }, g inventory.Guard) []string {
	if !g.NeedsEtcd() {
		return nil
	}
	return l.EtcdEndpoints()
}

// resolvedMembers remembers which members each etcd fault acted on (the
// leader is chosen when the fault fires), so that its heal at `for` heals
// those.
type resolvedMembers struct {
	mu sync.Mutex
	m  map[int][]int // by the fault's line
}

func (r *resolvedMembers) set(line int, ms []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[int][]int{}
	}
	r.m[line] = ms
}

func (r *resolvedMembers) get(line int) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[line]
}

// applyEtcd starts one fault on all its etcd members at once.
func (in *injector) applyEtcd(ctx context.Context, f Fault) error {
	if in.etcdN == 0 {
		return errors.New("drill: the lab has no etcd members")
	}
	var (
		mu       sync.Mutex
		resolved []int
	)
	err := onEach(f.Etcd, func(m int) string { return "etcd member " + spec.MemberName(m) }, func(m int) error {
		res, err := in.at.EtcdInjector(m).Apply(ctx, f.Kind, f.Params)
		in.notePowerLoss(res)
		if err != nil {
			return err
		}
		id := res.Target
		if id == 0 {
			id = m
		}
		if m == lab.TargetLeader {
			in.log("  the etcd leader was member %d", id)
		}
		mu.Lock()
		resolved = append(resolved, id)
		mu.Unlock()
		return nil
	})
	in.members.set(f.Line, resolved)
	return err
}

// heal ends f's network fault at its `for`: on its nodes, or on the etcd
// members it acted on.
func (in *injector) heal(ctx context.Context, f Fault) error {
	if len(f.Etcd) == 0 {
		return in.healNodes(ctx, f.Nodes)
	}
	return in.healMembers(ctx, in.members.get(f.Line))
}

// healEtcd ends every network fault on the etcd members (none in a lab
// without them).
func (in *injector) healEtcd(ctx context.Context) error {
	return in.healMembers(ctx, seq(in.etcdN))
}

// healMembers ends the network faults of the etcd members ms.
func (in *injector) healMembers(ctx context.Context, ms []int) error {
	return onEach(ms, func(m int) string { return "etcd member " + spec.MemberName(m) }, func(m int) error {
		_, err := in.at.EtcdInjector(m).Apply(ctx, fault.Heal, nil)
		return err
	})
}

// labFaultRecord is the history's record of a fault the lab kept: on a
// Redis node, or on an etcd member (EtcdMember, and Target "leader" when
// the member was the leader at the fault's start).
func labFaultRecord(f lab.Fault) FaultRecord {
	r := FaultRecord{Type: "fault", ID: f.ID, Fault: string(f.Kind)}
	if m, err := strconv.Atoi(f.Params[faultlog.EtcdMemberParam]); err == nil && f.Node == 0 {
		r.EtcdMember, r.Target = m, f.Params["target"]
		r.Nodes = []int{}
	} else {
		r.Nodes = []int{f.Node}
	}
	return r
}

// addLabFault records a fault of the lab's record, its start and its end
// when it ended.
func (h *History) addLabFault(f lab.Fault) {
	r := labFaultRecord(f)
	start := r
	start.Event, start.AtNs = "start", h.ns(f.Start)
	h.mu.Lock()
	h.faults = append(h.faults, start)
	h.mu.Unlock()
	if !f.End.IsZero() {
		end := r
		end.Event, end.AtNs = "end", h.ns(f.End)
		h.mu.Lock()
		h.faults = append(h.faults, end)
		h.mu.Unlock()
	}
}

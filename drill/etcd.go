package drill

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

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

// etcdLeader is how a spec names the member that leads when the fault
// fires; in Fault.Etcd it is lab.TargetLeader.
const etcdLeader = "leader"

// etcdPortStep is how far apart freeBasePort tries the base ports of a
// lab with etcd members, whose ranges reach base+1000+M: two steps of a
// lab without them, so that the two kinds of lab keep their alignment.
const etcdPortStep = 1200

// etcdFaults is what a drill does to the lab's etcd members: any fault of
// the catalogue that a member can apply, as data (*lab.Lab). member is
// lab.TargetLeader or a number from 1.
type etcdFaults interface {
	EtcdApply(ctx context.Context, member int, kind fault.Kind, params fault.Params) (lab.EtcdFaultResult, error)
	EtcdHeal(ctx context.Context, members ...int) error
}

var _ etcdFaults = (*lab.Lab)(nil)

// etcdCount parses lab.etcd: 0 (none), 1, 3 or 5 members.
func (p *specParser) etcdCount(e entry) int {
	n := int(p.integer(e, 0, lab.MaxEtcdMembers))
	if p.err == nil && n != 0 && n != 1 && n != 3 && n != 5 {
		p.fail(e.node, e.field, "want 0 (none), 1, 3 or 5 etcd members (odd: a majority must exist), got %d", n)
	}
	return n
}

// etcdMembers parses a fault's etcd: leader, a member number, or a list of
// them.
func (p *specParser) etcdMembers(e entry) []int {
	var out []int
	for _, me := range p.list(e) {
		v, ok := p.scalar(me)
		if !ok {
			return out
		}
		m := lab.TargetLeader
		if v != etcdLeader {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > lab.MaxEtcdMembers {
				p.fail(me.node, me.field, "want leader or a member number from 1 to %d, got %q", lab.MaxEtcdMembers, v)
				return out
			}
			m = n
		}
		if contains(out, m) {
			p.fail(me.node, me.field, "etcd member %s listed twice", memberName(m))
			return out
		}
		out = append(out, m)
	}
	return out
}

// checkEtcdFault checks a fault that names etcd members: not nodes too.
// Which kinds a member can have is the catalogue's (fault.EtcdMember).
func (p *specParser) checkEtcdFault(e entry, have map[string]entry, _ Fault) {
	if _, ok := have["etcd"]; !ok {
		return
	}
	if ne, both := have["nodes"]; both {
		p.fail(ne.keyNode, e.field+".nodes", "a fault acts on Redis nodes or on etcd members: give nodes or etcd, not both")
	}
}

// checkEtcd checks what needs the whole spec: members against the lab, the
// etcd guards against the lab and their TTL against etcd's leases.
func (p *specParser) checkEtcd(s *Spec) {
	if p.err != nil {
		return
	}
	if s.Lab.Etcd > 0 && s.Lab.Machines {
		p.err = &SpecError{File: p.file, Line: p.etcdLine, Field: "lab.etcd", Msg: "etcd members run on the process lab only, not on machines"}
		return
	}
	if s.Lab.EtcdUnsafeNoFsync && s.Lab.Etcd == 0 {
		p.err = &SpecError{File: p.file, Line: p.noFsyncLine, Field: "lab.etcd_unsafe_no_fsync", Msg: "the lab has no etcd members (lab: {etcd: 3})"}
		return
	}
	for i, g := range s.Workload.Guards {
		if !g.NeedsEtcd() {
			continue
		}
		field := fmt.Sprintf("workload.guards[%d]", i)
		if s.Lab.Etcd == 0 {
			p.err = &SpecError{File: p.file, Line: p.guardsLine, Field: field, Msg: fmt.Sprintf("guard %s locks on etcd: the lab needs etcd members (lab: {etcd: 3})", g)}
			return
		}
		if err := g.CheckTTL(s.Workload.LockTTL); err != nil {
			p.err = &SpecError{File: p.file, Line: p.guardsLine, Field: "workload.lock_ttl", Msg: trimPkg(err)}
			return
		}
		if s.Workload.LockTTL%time.Second != 0 {
			p.err = &SpecError{File: p.file, Line: p.guardsLine, Field: "workload.lock_ttl", Msg: fmt.Sprintf("guard %s: etcd leases are whole seconds: give %v or %v, not %v",
				g, s.Workload.LockTTL.Truncate(time.Second), s.Workload.LockTTL.Truncate(time.Second)+time.Second, s.Workload.LockTTL)}
			return
		}
	}
	for i, f := range s.Faults {
		field := fmt.Sprintf("faults[%d].etcd", i)
		for _, m := range f.Etcd {
			if s.Lab.Etcd == 0 {
				p.err = &SpecError{File: p.file, Line: f.Line, Field: field, Msg: "the lab has no etcd members (lab: {etcd: 3})"}
				return
			}
			if m > s.Lab.Etcd {
				p.err = &SpecError{File: p.file, Line: f.Line, Field: field, Msg: fmt.Sprintf("etcd member %d is out of range: the lab has members 1-%d", m, s.Lab.Etcd)}
				return
			}
		}
	}
}

// etcdEndpoints are the client URLs guard g gets: the lab's members for
// the etcd guards, none for the others.
func etcdEndpoints(l interface{ EtcdEndpoints() []string }, g inventory.Guard) []string {
	if !g.NeedsEtcd() {
		return nil
	}
	return l.EtcdEndpoints()
}

// memberName is how a member of Fault.Etcd reads: "leader" or its number.
func memberName(m int) string {
	if m == lab.TargetLeader {
		return etcdLeader
	}
	return strconv.Itoa(m)
}

// memberList reads like nodeList: "etcd leader", "etcd members 1,2".
func memberList(ms []int) string {
	if len(ms) == 0 {
		return "all etcd members"
	}
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = memberName(m)
	}
	if len(ms) == 1 {
		if ms[0] == lab.TargetLeader {
			return "etcd leader"
		}
		return "etcd member " + s[0]
	}
	return "etcd members " + strings.Join(s, ",")
}

// faultTargets is what a fault acts on, as the schedule's log says it.
func faultTargets(f Fault) string {
	if len(f.Etcd) > 0 {
		return memberList(f.Etcd)
	}
	return nodeList(f.Nodes)
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
	if in.etcd == nil {
		return errors.New("drill: the lab has no etcd members")
	}
	if f.Kind == fault.Heal {
		return in.etcd.EtcdHeal(ctx, f.Etcd...)
	}
	var (
		mu       sync.Mutex
		resolved []int
	)
	err := onEach(f.Etcd, func(m int) string { return "etcd member " + memberName(m) }, func(m int) error {
		var (
			res lab.EtcdFaultResult
			err error
		)
		res, err = in.etcd.EtcdApply(ctx, m, f.Kind, f.Params)
		if res.PowerLoss != nil {
			in.notePowerLoss(lab.FaultResult{PowerLoss: res.PowerLoss})
		}
		if err != nil {
			return err
		}
		id := res.Status.ID
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
		return in.nodes.Heal(ctx, f.Nodes...)
	}
	ms := in.members.get(f.Line)
	if len(ms) == 0 {
		return nil // the fault did not start on any member
	}
	return in.etcd.EtcdHeal(ctx, ms...)
}

// healEtcd ends every network fault on the etcd members (none in a lab
// without them).
func (in *injector) healEtcd(ctx context.Context) error {
	if in.etcd == nil || in.etcdN == 0 {
		return nil
	}
	return in.etcd.EtcdHeal(ctx)
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

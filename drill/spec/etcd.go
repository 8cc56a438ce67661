// etcd in a drill spec: the lab's etcd members (lab: {etcd: 3}), and faults
// on members instead of Redis nodes:
//
//	- {at: 8s, fault: kill, etcd: leader}        # the member leading when the fault fires
//	- {at: 8s, fault: stop, etcd: [1, 2]}        # members numbered from 1
//	- {at: 18s, fault: partition, etcd: leader, for: 4s}
//
// A fault names nodes or etcd, not both.

package spec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/inventory"
)

// etcdLeader is how a spec names the member that leads when the fault
// fires; in Fault.Etcd it is profile.Leader.
const etcdLeader = "leader"

// etcdMembers parses a fault's etcd: leader, a member number, or a list of
// them.
func (p *specParser) etcdMembers(e entry) []int {
	var out []int
	for _, me := range p.list(e) {
		v, ok := p.scalar(me)
		if !ok {
			return out
		}
		m := profile.Leader
		if v != etcdLeader {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > profile.MaxEtcdMembers {
				p.fail(me.node, me.field, "want leader or a member number from 1 to %d, got %q", profile.MaxEtcdMembers, v)
				return out
			}
			m = n
		}
		if contains(out, m) {
			p.fail(me.node, me.field, "etcd member %s listed twice", MemberName(m))
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
	for i, g := range s.Workload.Guards {
		if !g.NeedsEtcd() {
			continue
		}
		field := fmt.Sprintf("workload.guards[%d]", i)
		if s.Lab.Etcd == 0 {
			p.err = &Error{File: p.file, Line: p.guardsLine, Field: field, Msg: fmt.Sprintf("guard %s locks on etcd: the lab needs etcd members (lab: {etcd: 3})", g)}
			return
		}
		if err := g.CheckTTL(s.Workload.LockTTL); err != nil {
			p.err = &Error{File: p.file, Line: p.guardsLine, Field: "workload.lock_ttl", Msg: trimPkg(err)}
			return
		}
		if s.Workload.LockTTL%time.Second != 0 {
			p.err = &Error{File: p.file, Line: p.guardsLine, Field: "workload.lock_ttl", Msg: fmt.Sprintf("guard %s: etcd leases are whole seconds: give %v or %v, not %v",
				g, s.Workload.LockTTL.Truncate(time.Second), s.Workload.LockTTL.Truncate(time.Second)+time.Second, s.Workload.LockTTL)}
			return
		}
	}
	for i, f := range s.Faults {
		field := fmt.Sprintf("faults[%d].etcd", i)
		for _, m := range f.Etcd {
			if s.Lab.Etcd == 0 {
				p.err = &Error{File: p.file, Line: f.Line, Field: field, Msg: "the lab has no etcd members (lab: {etcd: 3})"}
				return
			}
			if m > s.Lab.Etcd {
				p.err = &Error{File: p.file, Line: f.Line, Field: field, Msg: fmt.Sprintf("etcd member %d is out of range: the lab has members 1-%d", m, s.Lab.Etcd)}
				return
			}
		}
	}
}

// MemberName is how a member of Fault.Etcd reads: "leader" or its number.
func MemberName(m int) string {
	if m == profile.Leader {
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
		s[i] = MemberName(m)
	}
	if len(ms) == 1 {
		if ms[0] == profile.Leader {
			return "etcd leader"
		}
		return "etcd member " + s[0]
	}
	return "etcd members " + strings.Join(s, ",")
}

// Targets is what the fault acts on, as the schedule's log says it:
// "node 2", "nodes 1,2", "etcd leader".
func (f Fault) Targets() string {
	if len(f.Etcd) > 0 {
		return memberList(f.Etcd)
	}
	return nodeList(f.Nodes)
}

// WithoutEtcd is the spec on a lab that has no etcd members (machines, real
// hosts): a spec whose etcd members carry guards beside a fault of the Redis
// nodes (the seed's alternative, as a control or under that fault's twin on
// its own members) runs without the members, without their guards, which
// are returned (left out), and without the faults on them. A spec whose
// faults are all on etcd members is about etcd: ok is false, and the spec
// is returned as it is. A spec without etcd members is returned as it is.
func (s *Spec) WithoutEtcd() (out *Spec, leftOut []inventory.Guard, ok bool) {
	onEtcd := func(f Fault) bool { return len(f.Etcd) > 0 }
	if s.Lab.Etcd == 0 {
		return s, nil, true
	}
	if len(s.Faults) > 0 && !slices.ContainsFunc(s.Faults, func(f Fault) bool { return !onEtcd(f) }) {
		return s, nil, false
	}
	c := *s
	c.Lab.Etcd = 0
	c.Lab.EtcdUnsafeNoFsync = false
	c.Faults = slices.DeleteFunc(slices.Clone(s.Faults), onEtcd)
	c.Workload.Guards = nil
	c.Expect = map[inventory.Guard][]Expectation{}
	for _, g := range s.Workload.Guards {
		if g.NeedsEtcd() {
			leftOut = append(leftOut, g)
			continue
		}
		c.Workload.Guards = append(c.Workload.Guards, g)
		if e, ok := s.Expect[g]; ok {
			c.Expect[g] = e
		}
	}
	return &c, leftOut, true
}

// A drill's faults: their kinds, what each takes, how a spec names them,
// and what a lab profile or a scope refuses.

package spec

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/inventory"
)

// FaultKind names a drill fault: a kind of the catalogue (package fault),
// which says what each takes and what can apply it.
type FaultKind = fault.Kind

// Fault is one scheduled fault.
type Fault struct {
	At    time.Duration // from the start of the load
	Kind  FaultKind
	Nodes []int // numbered from 1
	// Etcd are the etcd members the fault acts on instead of nodes,
	// numbered from 1; profile.Leader (0) is the member leading when the
	// fault fires.
	Etcd []int
	// Params are the fault's parameters as the catalogue defines them:
	// for, delay, add, jitter, by, factor, lag, count (guards and scope are
	// present, their values below).
	Params fault.Params
	// Guards limits a client-pause to these guards (default: every guard).
	Guards []inventory.Guard
	// Count is how many holders a client-pause freezes (default 1).
	Count int
	// Scope is what a client-pause freezes (default request): the
	// holder's goroutine, or with process its whole service process,
	// which then runs as `redlab serve` processes (see serveProcs).
	Scope inventory.PauseScope
	// Line is the fault's line in the spec file.
	Line int
}

// For is how long the fault lasts (pause, clock-rate, client-pause), or
// after how long the drill heals it (partition, latency); 0: not given.
func (f Fault) For() time.Duration { return f.Params.D(fault.For) }

func (p *specParser) fault(e entry) Fault {
	f := Fault{Line: p.line(e.node), Count: 1, Params: fault.Params{}}
	have := map[string]entry{}
	entries := p.mapping(e.node, e.field, append([]string{"at", "fault", "nodes", "etcd"}, fault.ParamNames()...)...)
	// The kind first: the parameters are read as its own.
	for _, fe := range entries {
		if fe.key != "fault" {
			continue
		}
		if v, ok := p.scalar(fe); ok {
			f.Kind = FaultKind(v)
			if _, known := fault.Lookup(f.Kind); !known {
				p.fail(fe.node, fe.field, "unknown fault %q (want one of %s)", v, fault.Kinds())
			}
		}
	}
	for _, fe := range entries {
		have[fe.key] = fe
		if p.err != nil {
			break
		}
		switch fe.key {
		case "fault":
		case "at":
			f.At = p.duration(fe, 0)
		case "nodes":
			for _, ne := range p.list(fe) {
				n := int(p.integer(ne, 1, profile.MaxNodes))
				if contains(f.Nodes, n) {
					p.fail(ne.node, ne.field, "node %d listed twice", n)
				}
				f.Nodes = append(f.Nodes, n)
			}
		case "etcd":
			f.Etcd = p.etcdMembers(fe)
		case "guards":
			f.Params[fe.key] = fault.Value{Names: []string{}}
			f.Guards = p.guards(fe)
		case "scope":
			f.Params[fe.key] = fault.Value{Names: []string{}}
			if v, ok := p.scalar(fe); ok {
				sc, err := inventory.ParsePauseScope(v)
				if err != nil {
					p.fail(fe.node, fe.field, "unknown scope %q (want %s: one request's goroutine, or the whole service process)", v, inventory.PauseScopes())
				}
				f.Scope = sc
			}
		default: // a parameter of the catalogue
			v, ok := p.scalar(fe)
			if !ok {
				break
			}
			val, err := fault.Parse(f.Kind, fe.key, v)
			if err != nil {
				p.faultError(err, e, have)
				break
			}
			f.Params[fe.key] = val
		}
	}
	if p.err != nil {
		return f
	}
	for _, req := range []string{"at", "fault"} {
		if _, ok := have[req]; !ok {
			p.fail(e.node, e.field+"."+req, "missing")
			return f
		}
	}
	if f.Params.Has("count") {
		f.Count = int(f.Params.N("count"))
	}
	def, _ := fault.Lookup(f.Kind)
	_, hasNodes := have["nodes"]
	_, hasEtcd := have["etcd"]
	if p.checkEtcdFault(e, have, f); p.err != nil {
		return f
	}
	switch {
	case def.Nodes && !def.NodesOptional && !hasNodes && !hasEtcd:
		p.fail(e.node, e.field+".nodes", "%s needs the nodes it acts on (numbered from 1)", f.Kind)
		return f
	case !def.Nodes && hasNodes:
		p.fail(have["nodes"].keyNode, e.field+".nodes", "%s acts on no node (%s): give guards (optional), not nodes", f.Kind, def.Summary)
		return f
	}
	// The parameters, and whether what the fault names can apply it; the
	// lab's replicas and machines are checked with the whole spec
	// (checkFaults).
	target := def.Targets[0]
	if hasEtcd {
		target = fault.EtcdMember
	}
	if err := fault.Validate(f.Kind, f.Params, target, true); err != nil {
		p.faultError(err, e, have)
		return f
	}
	if f.Kind == fault.ClientPause && f.Scope == "" {
		f.Scope = inventory.ScopeRequest
	}
	return f
}

// faultError reports a catalogue error of the fault at e: on the parameter
// it names (at its key when given), on etcd when etcd members cannot apply
// it, or else on the fault.
func (p *specParser) faultError(err error, e entry, have map[string]entry) {
	var fe *fault.Error
	if !errors.As(err, &fe) {
		p.fail(e.node, e.field, "%v", err)
		return
	}
	switch ee, etcd := have["etcd"]; {
	case fe.Param != "":
		n := e.node
		if pe, ok := have[fe.Param]; ok {
			n = pe.keyNode
		}
		p.fail(n, e.field+"."+fe.Param, "%s", fe.Rule)
	case etcd && fe.Unsupported:
		p.fail(ee.keyNode, e.field+".etcd", "%s", fe.Rule)
	default:
		p.fail(e.node, e.field+".fault", "%s", fe.Rule)
	}
}

// checkFaults checks what needs the whole spec: node numbers against the
// lab, times against the duration, client-pause guards against the workload.
func (p *specParser) checkFaults(s *Spec) {
	for i, f := range s.Faults {
		field := fmt.Sprintf("faults[%d]", i)
		for _, n := range f.Nodes {
			if n > s.Lab.Nodes {
				p.err = &Error{File: p.file, Line: f.Line, Field: field + ".nodes", Msg: fmt.Sprintf("node %d is out of range: the lab has nodes 1-%d", n, s.Lab.Nodes)}
				return
			}
		}
		if s.Workload.Duration > 0 && f.At >= s.Workload.Duration {
			p.err = &Error{File: p.file, Line: f.Line, Field: field + ".at", Msg: fmt.Sprintf("%v is not before the end of the load (duration %v)", f.At, s.Workload.Duration)}
			return
		}
		for _, g := range f.Guards {
			if !contains(s.Workload.Guards, g) {
				p.err = &Error{File: p.file, Line: f.Line, Field: field + ".guards", Msg: fmt.Sprintf("guard %s is not in workload.guards", g)}
				return
			}
		}
		if msg := processPauseProblem(s, f); msg != "" {
			p.err = &Error{File: p.file, Line: f.Line, Field: field + ".scope", Msg: msg}
			return
		}
		if fe := labFaultProblem(f, s.Lab.Machines, s.Lab.Replicas > 0); fe != nil {
			p.err = &Error{File: p.file, Line: f.Line, Field: field + ".fault", Msg: fe.Rule}
			if fe.Param != "" {
				p.err.Field = field + "." + fe.Param
			}
			return
		}
	}
	sort.SliceStable(s.Faults, func(i, j int) bool { return s.Faults[i].At < s.Faults[j].At })
}

// processPauseProblem says why the drill cannot run f's guards as `redlab
// serve` processes, or "". Such a guard gets all its client pauses through
// its processes: one scope per guard.
func processPauseProblem(s *Spec, f Fault) string {
	if f.Kind != fault.ClientPause {
		return ""
	}
	if f.Scope == inventory.ScopeProcess && f.For() > inventory.MaxPause {
		return fmt.Sprintf("scope process pauses a serve process for at most %v (inventory.MaxPause), got for: %v", inventory.MaxPause, f.For())
	}
	for _, g := range pausedGuards(s, f) {
		for _, o := range s.Faults {
			if o.Kind == fault.ClientPause && o.Scope != f.Scope && contains(pausedGuards(s, o), g) {
				return fmt.Sprintf("guard %s is paused with scope %s here and with scope %s at line %d: a guard's replicas run in the drill or as processes, so give all its client pauses one scope", g, f.Scope, o.Scope, o.Line)
			}
		}
		if f.Scope != inventory.ScopeProcess {
			continue
		}
		if _, err := inventory.ParseGuard(string(g)); err != nil {
			return fmt.Sprintf("scope process runs guard %s as `redlab serve` processes, and a service never runs a comparison guard: pause it with scope request, or limit guards", g)
		}
		if !s.Workload.Hold.IsZero() {
			return "scope process runs the guards as `redlab serve` processes, which have no workload hold: drop workload.hold, or use scope request"
		}
	}
	return ""
}

// pausedGuards are the guards a client-pause acts on.
func pausedGuards(s *Spec, f Fault) []inventory.Guard {
	if len(f.Guards) > 0 {
		return f.Guards
	}
	return s.Workload.Guards
}

// ProcessGuards are the guards that run as `redlab serve` processes: those
// a client-pause with scope process acts on.
func (s *Spec) ProcessGuards() []inventory.Guard {
	var out []inventory.Guard
	for _, g := range s.Workload.Guards {
		for _, f := range s.Faults {
			if f.Kind == fault.ClientPause && f.Scope == inventory.ScopeProcess && contains(pausedGuards(s, f), g) && !contains(out, g) {
				out = append(out, g)
			}
		}
	}
	return out
}

// labFaultProblem says why the lab's nodes (machines or processes, with
// replicas or not) cannot apply f, or nil: the catalogue's verdict. A
// fault on etcd members or on the service was judged when it was read.
func labFaultProblem(f Fault, machines, replicas bool) *fault.Error {
	if len(f.Etcd) > 0 || f.Kind == fault.ClientPause {
		return nil
	}
	target := fault.ProcessNode
	if machines {
		target = fault.MachineNode
	}
	var fe *fault.Error
	if err := fault.Validate(f.Kind, f.Params, target, replicas); errors.As(err, &fe) {
		return fe
	}
	return nil
}

// CheckMachines reports why spec cannot run on a lab of machines (the
// --machines of `redlab drill`), or nil: it runs there without its etcd
// members (WithoutEtcd), which run next to process nodes only. A spec that
// asks for machines itself was checked when it was read.
func CheckMachines(spec *Spec) error {
	spec, _, _ = spec.WithoutEtcd()
	on := spec.Lab
	on.Machines = true
	if err := on.Validate(); err != nil {
		return fmt.Errorf("drill %s: on machines: %w", spec.Name, err)
	}
	for i, f := range spec.Faults {
		if fe := labFaultProblem(f, true, false); fe != nil && fe.Unsupported {
			return fmt.Errorf("drill %s: faults[%d] (line %d): %s", spec.Name, i, f.Line, fe.Rule)
		}
	}
	return nil
}

// String is the fault as a drill's log shows it: "kill node 2",
// "latency nodes 1,2 +200ms for 5s".
func (f Fault) String() string {
	var b strings.Builder
	b.WriteString(string(f.Kind))
	if len(f.Nodes) > 0 || len(f.Etcd) > 0 {
		b.WriteString(" ")
		b.WriteString(f.Targets())
	}
	p := f.Params
	switch f.Kind {
	case fault.Restart:
		fmt.Fprintf(&b, " delay %v", p.D("delay"))
	case fault.Latency:
		fmt.Fprintf(&b, " +%v", p.D("add"))
		if p.D("jitter") > 0 {
			fmt.Fprintf(&b, " ±%v", p.D("jitter"))
		}
	case fault.ClockJump:
		fmt.Fprintf(&b, " by %v", p.D("by"))
	case fault.ClockRate:
		fmt.Fprintf(&b, " ×%g", p.N("factor"))
	case fault.Failover:
		if p.D("lag") > 0 {
			fmt.Fprintf(&b, " after %v of replication lag", p.D("lag"))
		}
	case fault.ClientPause:
		if len(f.Guards) > 0 {
			b.WriteString(" " + inventory.JoinGuards(f.Guards))
		}
		if f.Count > 1 {
			fmt.Fprintf(&b, " %d holders", f.Count)
		}
		fmt.Fprintf(&b, " (scope %s)", f.Scope)
	}
	if f.For() > 0 {
		fmt.Fprintf(&b, " for %v", f.For())
	}
	return b.String()
}

func nodeList(ns []int) string {
	if len(ns) == 0 {
		return "all nodes"
	}
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	if len(ns) == 1 {
		return "node " + s[0]
	}
	return "nodes " + strings.Join(s, ",")
}

// CutsPower reports whether a fault of the spec is a power loss: the lab
// then needs the power-loss filesystem (profile.Profile.PowerLoss).
func (s *Spec) CutsPower() bool {
	for _, f := range s.Faults {
		if f.Kind == fault.PowerLoss {
			return true
		}
	}
	return false
}

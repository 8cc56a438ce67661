// A drill's faults: their kinds, what each takes, how a spec names them,
// and what a lab profile or a scope refuses.

package drill

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/inventory"
)

// FaultKind names a drill fault.
type FaultKind string

// The faults a drill can schedule. All but client-pause act on lab nodes.
const (
	FaultKill        FaultKind = "kill"         // SIGKILL redis-server; back after the restart delay
	FaultPowerLoss   FaultKind = "power-loss"   // a crash that loses what was not fsynced
	FaultRestart     FaultKind = "restart"      // crash and restart after delay (default 0)
	FaultStop        FaultKind = "stop"         // clean shutdown, until start
	FaultStart       FaultKind = "start"        // start a stopped node
	FaultPause       FaultKind = "pause"        // SIGSTOP for `for`
	FaultPartition   FaultKind = "partition"    // silence, until heal or `for`
	FaultHeal        FaultKind = "heal"         // end partitions and latency
	FaultLatency     FaultKind = "latency"      // add delay, until heal or `for`
	FaultClockJump   FaultKind = "clock-jump"   // the node's clock steps forward by `by`
	FaultClockRate   FaultKind = "clock-rate"   // the node's clock runs `factor` fast for `for`
	FaultClientPause FaultKind = "client-pause" // a lock holder freezes inside its critical section for `for`; scope: request | process
	// FaultFailover crashes the master of each node and promotes its replica
	// behind the node's address, after holding replication back for `lag`
	// (optional); the lab needs replicas: 1.
	FaultFailover FaultKind = "failover"
)

// faultKinds is every kind with what it needs: nodes, a duration, params.
var faultKinds = map[FaultKind]struct {
	nodes    bool // needs nodes (heal: optional)
	needsFor bool
	allowFor bool
}{
	FaultKill:        {nodes: true},
	FaultPowerLoss:   {nodes: true},
	FaultRestart:     {nodes: true},
	FaultStop:        {nodes: true},
	FaultStart:       {nodes: true},
	FaultPause:       {nodes: true, needsFor: true, allowFor: true},
	FaultPartition:   {nodes: true, allowFor: true},
	FaultHeal:        {},
	FaultLatency:     {nodes: true, allowFor: true},
	FaultClockJump:   {nodes: true},
	FaultClockRate:   {nodes: true, needsFor: true, allowFor: true},
	FaultClientPause: {needsFor: true, allowFor: true},
	FaultFailover:    {nodes: true},
}

func faultKindNames() string {
	names := make([]string, 0, len(faultKinds))
	for k := range faultKinds {
		names = append(names, string(k))
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// Fault is one scheduled fault.
type Fault struct {
	At    time.Duration // from the start of the load
	Kind  FaultKind
	Nodes []int // numbered from 1
	// Etcd are the etcd members the fault acts on instead of nodes,
	// numbered from 1; lab.TargetLeader (0) is the member leading when the
	// fault fires.
	Etcd []int
	// For ends the fault after this long (pause, clock-rate, client-pause:
	// required; partition, latency: optional, else until a heal or the end).
	For    time.Duration
	Delay  time.Duration // restart
	Add    time.Duration // latency
	Jitter time.Duration // latency
	By     time.Duration // clock-jump
	Factor float64       // clock-rate
	Lag    time.Duration // failover
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

func (p *specParser) fault(e entry) Fault {
	f := Fault{Line: p.line(e.node), Count: 1}
	have := map[string]entry{}
	for _, fe := range p.mapping(e.node, e.field, "at", "fault", "nodes", "etcd", "for", "delay", "add", "jitter", "by", "factor", "guards", "count", "lag", "scope") {
		have[fe.key] = fe
		switch fe.key {
		case "at":
			f.At = p.duration(fe, 0)
		case "fault":
			if v, ok := p.scalar(fe); ok {
				f.Kind = FaultKind(v)
				if _, known := faultKinds[f.Kind]; !known {
					p.fail(fe.node, fe.field, "unknown fault %q (want one of %s)", v, faultKindNames())
				}
			}
		case "nodes":
			for _, ne := range p.list(fe) {
				n := int(p.integer(ne, 1, lab.MaxNodes))
				if contains(f.Nodes, n) {
					p.fail(ne.node, ne.field, "node %d listed twice", n)
				}
				f.Nodes = append(f.Nodes, n)
			}
		case "etcd":
			f.Etcd = p.etcdMembers(fe)
		case "for":
			f.For = p.duration(fe, time.Millisecond)
		case "delay":
			f.Delay = p.duration(fe, 0)
		case "add":
			f.Add = p.duration(fe, time.Millisecond)
		case "jitter":
			f.Jitter = p.duration(fe, 0)
		case "by":
			f.By = p.duration(fe, time.Millisecond)
		case "factor":
			f.Factor = p.number(fe, 0.001, 1000)
		case "guards":
			for _, ge := range p.list(fe) {
				v, ok := p.scalar(ge)
				if !ok {
					break
				}
				g, err := inventory.ParseAnyGuard(v)
				if err != nil {
					p.fail(ge.node, ge.field, "unknown guard %q (want one of %s)", v, inventory.JoinGuards(append(inventory.Guards(), inventory.Comparisons()...)))
					break
				}
				f.Guards = append(f.Guards, g)
			}
		case "count":
			f.Count = int(p.integer(fe, 1, 1000))
		case "lag":
			f.Lag = p.duration(fe, 0)
		case "scope":
			if v, ok := p.scalar(fe); ok {
				sc, err := inventory.ParsePauseScope(v)
				if err != nil {
					p.fail(fe.node, fe.field, "unknown scope %q (want %s: one request's goroutine, or the whole service process)", v, inventory.PauseScopes())
				}
				f.Scope = sc
			}
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
	k := faultKinds[f.Kind]
	_, hasNodes := have["nodes"]
	_, hasEtcd := have["etcd"]
	_, hasFor := have["for"]
	if p.checkEtcdFault(e, have, f); p.err != nil {
		return f
	}
	switch {
	case k.nodes && !hasNodes && !hasEtcd:
		p.fail(e.node, e.field+".nodes", "%s needs the nodes it acts on (numbered from 1)", f.Kind)
	case f.Kind == FaultClientPause && hasNodes:
		p.fail(have["nodes"].keyNode, e.field+".nodes", "client-pause freezes a lock holder, not a node: give guards (optional), not nodes")
	case k.needsFor && !hasFor:
		p.fail(e.node, e.field+".for", "%s needs a duration (for: 15s)", f.Kind)
	case hasFor && !k.allowFor:
		p.fail(have["for"].keyNode, e.field+".for", "%s takes no duration", f.Kind)
	}
	param := func(key string, kinds ...FaultKind) {
		if pe, ok := have[key]; ok && !contains(kinds, f.Kind) {
			p.fail(pe.keyNode, pe.field, "%s takes no %s (it applies to %s)", f.Kind, key, joinKinds(kinds))
		}
	}
	param("delay", FaultRestart)
	param("add", FaultLatency)
	param("jitter", FaultLatency)
	param("by", FaultClockJump)
	param("factor", FaultClockRate)
	param("guards", FaultClientPause)
	param("count", FaultClientPause)
	param("lag", FaultFailover)
	param("scope", FaultClientPause)
	if f.Kind == FaultClientPause && f.Scope == "" {
		f.Scope = inventory.ScopeRequest
	}
	if _, ok := have["add"]; f.Kind == FaultLatency && !ok {
		p.fail(e.node, e.field+".add", "latency needs add (add: 200ms)")
	}
	if _, ok := have["by"]; f.Kind == FaultClockJump && !ok {
		p.fail(e.node, e.field+".by", "clock-jump needs by (by: 15s)")
	}
	if _, ok := have["factor"]; f.Kind == FaultClockRate && !ok {
		p.fail(e.node, e.field+".factor", "clock-rate needs factor (factor: 1.5)")
	}
	return f
}

func joinKinds(ks []FaultKind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// checkFaults checks what needs the whole spec: node numbers against the
// lab, times against the duration, client-pause guards against the workload.
func (p *specParser) checkFaults(s *Spec) {
	for i, f := range s.Faults {
		field := fmt.Sprintf("faults[%d]", i)
		for _, n := range f.Nodes {
			if n > s.Lab.Nodes {
				p.err = &SpecError{File: p.file, Line: f.Line, Field: field + ".nodes", Msg: fmt.Sprintf("node %d is out of range: the lab has nodes 1-%d", n, s.Lab.Nodes)}
				return
			}
		}
		if s.Workload.Duration > 0 && f.At >= s.Workload.Duration {
			p.err = &SpecError{File: p.file, Line: f.Line, Field: field + ".at", Msg: fmt.Sprintf("%v is not before the end of the load (duration %v)", f.At, s.Workload.Duration)}
			return
		}
		for _, g := range f.Guards {
			if !contains(s.Workload.Guards, g) {
				p.err = &SpecError{File: p.file, Line: f.Line, Field: field + ".guards", Msg: fmt.Sprintf("guard %s is not in workload.guards", g)}
				return
			}
		}
		if msg := processPauseProblem(s, f); msg != "" {
			p.err = &SpecError{File: p.file, Line: f.Line, Field: field + ".scope", Msg: msg}
			return
		}
		if f.Kind == FaultFailover && s.Lab.Replicas == 0 {
			p.err = &SpecError{File: p.file, Line: f.Line, Field: field + ".fault", Msg: "failover promotes a node's replica: the lab needs replicas (lab: {replicas: 1})"}
			return
		}
		if s.Lab.Machines {
			if msg := machineFaultProblem(f); msg != "" {
				p.err = &SpecError{File: p.file, Line: f.Line, Field: field + ".fault", Msg: msg}
				return
			}
		}
	}
	if s.Lab.Machines && s.Lab.Replicas > 0 {
		p.err = &SpecError{File: p.file, Line: p.nameLine, Field: "lab.machines", Msg: "machines and replicas do not go together: a machine runs one redis-server under systemd"}
		return
	}
	if s.Lab.TLS && (s.Lab.Replicas > 0 || s.Lab.Machines) {
		p.err = &SpecError{File: p.file, Line: p.tlsLine, Field: "lab.tls", Msg: "tls goes with independent process nodes only, not with replicas (their replication links would need TLS too) or machines"}
		return
	}
	sort.SliceStable(s.Faults, func(i, j int) bool { return s.Faults[i].At < s.Faults[j].At })
}

// processPauseProblem says why the drill cannot run f's guards as `redlab
// serve` processes, or "". Such a guard gets all its client pauses through
// its processes: one scope per guard.
func processPauseProblem(s *Spec, f Fault) string {
	if f.Kind != FaultClientPause {
		return ""
	}
	if f.Scope == inventory.ScopeProcess && f.For > inventory.MaxPause {
		return fmt.Sprintf("scope process pauses a serve process for at most %v (inventory.MaxPause), got for: %v", inventory.MaxPause, f.For)
	}
	for _, g := range pausedGuards(s, f) {
		for _, o := range s.Faults {
			if o.Kind == FaultClientPause && o.Scope != f.Scope && contains(pausedGuards(s, o), g) {
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

// processGuards are the guards that run as `redlab serve` processes: those
// a client-pause with scope process acts on.
func (s *Spec) processGuards() []inventory.Guard {
	var out []inventory.Guard
	for _, g := range s.Workload.Guards {
		for _, f := range s.Faults {
			if f.Kind == FaultClientPause && f.Scope == inventory.ScopeProcess && contains(pausedGuards(s, f), g) && !contains(out, g) {
				out = append(out, g)
			}
		}
	}
	return out
}

// machineFaultProblem says why a lab of machines cannot apply f, or "".
func machineFaultProblem(f Fault) string {
	switch {
	case f.Kind == FaultClockJump || f.Kind == FaultClockRate:
		return fmt.Sprintf("%s models the clock through keys' TTLs; a machine's clock is the host's: run it on the process lab", f.Kind)
	case f.Kind == FaultFailover:
		return "failover needs replicas, which a lab of machines does not have"
	case f.Kind == FaultRestart && f.Delay != 0:
		return "on a machine restart is `systemctl restart`, which starts at once: only delay 0 (kill waits the restart delay)"
	}
	return ""
}

// CheckMachines reports why spec cannot run on a lab of machines (the
// --machines of `redlab drill`), or nil. A spec that asks for machines
// itself was checked when it was read.
func CheckMachines(spec *Spec) error {
	if spec.Lab.Replicas > 0 {
		return fmt.Errorf("drill %s: machines and replicas do not go together: a machine runs one redis-server under systemd", spec.Name)
	}
	for i, f := range spec.Faults {
		if msg := machineFaultProblem(f); msg != "" {
			return fmt.Errorf("drill %s: faults[%d] (line %d): %s", spec.Name, i, f.Line, msg)
		}
	}
	return nil
}

package drill

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
)

// Spec is one drill: the lab it needs, the load every guard runs, the faults
// on their schedule and what each guard is expected to show. It is the YAML
// front matter of a runbook (runbooks/drills/<name>.md).
type Spec struct {
	// Name is the drill's name; it equals the runbook's file name without
	// ".md".
	Name string
	// Title is a one-line description for the matrix.
	Title    string
	Lab      LabSpec
	Workload Workload
	Faults   []Fault
	// Expect holds each guard's expectations, in the spec's order.
	Expect map[inventory.Guard][]Expectation
	// File is where the spec was read from.
	File string
}

// LabSpec is the lab profile of a drill.
type LabSpec struct {
	Nodes int
	// Persistence has one profile per node.
	Persistence  []lab.Persistence
	RestartDelay time.Duration
}

// Workload is the load each guard runs, at once, on the same lab: every
// guard gets the same rate, keys (under its own prefix) and hold, its own
// store and its own lock clients.
type Workload struct {
	Guards         []inventory.Guard
	Rate           float64 // operations per second, per guard
	Duration       time.Duration
	Keys           loadgen.KeySpec
	Hold           loadgen.HoldSpec
	Quantity       loadgen.QuantitySpec
	LockTTL        time.Duration
	AcquireTimeout time.Duration
	NodeTimeout    time.Duration
	Replicas       int
	Stock          int64
	Seed           uint64
}

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
	FaultClientPause FaultKind = "client-pause" // a lock holder freezes inside its critical section for `for`
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
	// For ends the fault after this long (pause, clock-rate, client-pause:
	// required; partition, latency: optional, else until a heal or the end).
	For    time.Duration
	Delay  time.Duration // restart
	Add    time.Duration // latency
	Jitter time.Duration // latency
	By     time.Duration // clock-jump
	Factor float64       // clock-rate
	// Guards limits a client-pause to these guards (default: every guard).
	Guards []inventory.Guard
	// Count is how many holders a client-pause freezes (default 1).
	Count int
	// Line is the fault's line in the spec file.
	Line int
}

// Phase names a slice of a drill: before the first fault, during the faults
// (until the last one ends or is healed), after them.
type Phase string

// The phases.
const (
	PhaseAll    Phase = ""
	PhaseBefore Phase = "before"
	PhaseDuring Phase = "during"
	PhaseAfter  Phase = "after"
)

// Phases lists the phases in order.
var Phases = []Phase{PhaseBefore, PhaseDuring, PhaseAfter}

// Expectation is one condition a guard must meet: a load-generator threshold
// (loadgen.ParseThreshold's grammar, with safety.lock_violations), judged on
// the whole run or, with a phase prefix (during.outcomes.unavailable<1%), on
// the operations due in that phase. Beyond that grammar:
//
//	during.grants==0      locks granted in a phase (from the history); for
//	                      during, only while every fault was in force (from
//	                      the last start to the first end), so that a fault
//	                      applied or healed node by node does not count the
//	                      instants when only part of it held
//	recovery<2s           from the end of the faults to the first grant after it
//	during.acquire.p99<=2*before.acquire.p99
//	                      a value relative to another phase's figure
type Expectation struct {
	Expr  string
	Phase Phase
	// Threshold is the parsed condition without its phase prefix; for
	// grants and recovery only its Op and Value are used, and for a
	// relative value only its metric and Op.
	Threshold loadgen.Threshold
	Grants    bool
	Recovery  bool
	// Ref, when set, makes the value Factor times another figure.
	Ref  *loadgen.Threshold
	Refs Phase
	// Factor multiplies Ref's figure.
	Factor float64
	Line   int
}

// SpecError is a spec that cannot run: it names the file, the line and the
// field.
type SpecError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *SpecError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrSpec is wrapped by every SpecError.
var ErrSpec = errors.New("drill: invalid spec")

// Unwrap makes errors.Is(err, ErrSpec) hold.
func (e *SpecError) Unwrap() error { return ErrSpec }

// Defaults of a spec.
const (
	DefaultNodes          = 5
	DefaultReplicas       = 2
	DefaultStock          = 1_000_000
	DefaultSeed           = 1
	maxDrillDuration      = 30 * time.Minute
	maxRatePerGuard       = 2000
	frontMatterDelimiter  = "---"
	defaultRestartDelayMs = 5000
)

var drillName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ReadFile reads the spec from the front matter of a runbook.
func ReadFile(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("drill: %w", err)
	}
	return Parse(path, b)
}

// Parse reads a spec from a runbook's bytes: the YAML between a first line
// "---" and the next "---" line. name is the file the bytes came from; the
// drill's name must equal its base name without ".md".
func Parse(name string, b []byte) (*Spec, error) {
	fm, first, err := frontMatter(b)
	if err != nil {
		return nil, &SpecError{File: name, Line: 1, Msg: err.Error()}
	}
	f, err := parser.ParseBytes(fm, 0)
	if err != nil {
		return nil, &SpecError{File: name, Line: yamlErrorLine(err, first), Msg: "YAML: " + firstLine(err.Error())}
	}
	if len(f.Docs) != 1 || f.Docs[0].Body == nil {
		return nil, &SpecError{File: name, Line: first, Msg: "the front matter holds no YAML mapping"}
	}
	p := &specParser{file: name, offset: first - 1}
	s := p.spec(f.Docs[0].Body)
	if p.err != nil {
		return nil, p.err
	}
	s.File = name
	if base := strings.TrimSuffix(filepath.Base(name), ".md"); filepath.Ext(name) == ".md" && s.Name != base {
		return nil, &SpecError{File: name, Line: p.nameLine, Field: "drill", Msg: fmt.Sprintf("%q does not match the file name %q: a drill's runbook is <drill>.md", s.Name, base+".md")}
	}
	return s, nil
}

// frontMatter returns the YAML between the opening and closing "---" lines
// and the line number (from 1) of its first line in the file.
func frontMatter(b []byte) ([]byte, int, error) {
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines) == 0 || strings.TrimSpace(string(lines[0])) != frontMatterDelimiter {
		return nil, 0, errors.New(`no front matter: a drill runbook starts with a "---" line, the YAML spec, and a closing "---" line`)
	}
	for i := 1; i < len(lines); i++ {
		if strings.TrimSpace(string(lines[i])) == frontMatterDelimiter {
			return bytes.Join(lines[1:i], nil), 2, nil
		}
	}
	return nil, 0, errors.New(`front matter is not closed: add a "---" line after the YAML spec`)
}

var yamlLineRE = regexp.MustCompile(`^\[(\d+):(\d+)\]`)

func yamlErrorLine(err error, first int) int {
	if m := yamlLineRE.FindStringSubmatch(strings.TrimSpace(err.Error())); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n + first - 1
	}
	return first
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return yamlLineRE.ReplaceAllString(s, "")
}

// specParser walks the YAML tree, keeping the first error with its position.
type specParser struct {
	file     string
	offset   int // lines before the front matter
	err      *SpecError
	nameLine int
}

func (p *specParser) line(n ast.Node) int {
	if n == nil || n.GetToken() == nil {
		return 0
	}
	return n.GetToken().Position.Line + p.offset
}

func (p *specParser) fail(n ast.Node, field, format string, a ...any) {
	if p.err == nil {
		p.err = &SpecError{File: p.file, Line: p.line(n), Field: field, Msg: fmt.Sprintf(format, a...)}
	}
}

// mapping returns the key → value entries of a mapping node in order, and
// fails on anything else or on duplicate or unknown keys.
func (p *specParser) mapping(n ast.Node, field string, known ...string) []entry {
	n = unwrap(n)
	m, ok := n.(*ast.MappingNode)
	if !ok {
		if mv, ok := n.(*ast.MappingValueNode); ok { // a one-entry mapping
			m = &ast.MappingNode{Values: []*ast.MappingValueNode{mv}}
		} else {
			p.fail(n, field, "want a mapping of %s", strings.Join(known, ", "))
			return nil
		}
	}
	var out []entry
	seen := map[string]bool{}
	for _, mv := range m.Values {
		k := mv.Key.String()
		sub := k
		if field != "" {
			sub = field + "." + k
		}
		switch {
		case seen[k]:
			p.fail(mv.Key, sub, "given twice")
		case len(known) > 0 && !contains(known, k):
			p.fail(mv.Key, sub, "unknown field (want one of %s)", strings.Join(known, ", "))
		}
		seen[k] = true
		out = append(out, entry{key: k, field: sub, node: mv.Value, keyNode: mv.Key})
	}
	return out
}

type entry struct {
	key, field string
	node       ast.Node
	keyNode    ast.Node
}

func unwrap(n ast.Node) ast.Node {
	for {
		switch t := n.(type) {
		case *ast.TagNode:
			n = t.Value
		case *ast.AnchorNode:
			n = t.Value
		default:
			return n
		}
	}
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// scalar returns a scalar's text; it fails on mappings and sequences.
func (p *specParser) scalar(e entry) (string, bool) {
	switch n := unwrap(e.node).(type) {
	case *ast.StringNode:
		return n.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return n.GetToken().Value, true
	case *ast.NullNode, nil:
		p.fail(e.keyNode, e.field, "has no value")
	default:
		p.fail(e.node, e.field, "want a single value, got %s", describe(e.node))
	}
	return "", false
}

func describe(n ast.Node) string {
	switch unwrap(n).(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.String())
}

// list returns the items of a sequence; a single scalar is a one-item list.
func (p *specParser) list(e entry) []entry {
	switch n := unwrap(e.node).(type) {
	case *ast.SequenceNode:
		out := make([]entry, len(n.Values))
		for i, v := range n.Values {
			out[i] = entry{key: e.key, field: fmt.Sprintf("%s[%d]", e.field, i), node: v, keyNode: v}
		}
		return out
	case *ast.NullNode, nil:
		p.fail(e.keyNode, e.field, "has no value")
		return nil
	default:
		return []entry{e}
	}
}

func (p *specParser) duration(e entry, min time.Duration) time.Duration {
	s, ok := p.scalar(e)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.fail(e.node, e.field, "want a duration like 10s or 500ms, got %q", s)
		return 0
	}
	if d < min {
		p.fail(e.node, e.field, "want at least %v, got %v", min, d)
	}
	return d
}

func (p *specParser) integer(e entry, lo, hi int64) int64 {
	s, ok := p.scalar(e)
	if !ok {
		return 0
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < lo || v > hi {
		p.fail(e.node, e.field, "want a whole number from %d to %d, got %q", lo, hi, s)
		return 0
	}
	return v
}

func (p *specParser) number(e entry, lo, hi float64) float64 {
	s, ok := p.scalar(e)
	if !ok {
		return 0
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || v < lo || v > hi {
		p.fail(e.node, e.field, "want a number from %g to %g, got %q", lo, hi, s)
		return 0
	}
	return v
}

func (p *specParser) spec(n ast.Node) *Spec {
	s := &Spec{
		Lab: LabSpec{Nodes: DefaultNodes, RestartDelay: defaultRestartDelayMs * time.Millisecond},
		Workload: Workload{
			Keys: loadgen.KeySpec{Kind: "uniform", N: 100}, Quantity: loadgen.QuantitySpec{Min: 1, Max: 1},
			LockTTL: inventory.DefaultLockTTL, AcquireTimeout: inventory.DefaultAcquireTimeout,
			Replicas: DefaultReplicas, Stock: DefaultStock, Seed: DefaultSeed,
		},
		Expect: map[inventory.Guard][]Expectation{},
	}
	var persistence entry
	var expect []entry
	have := map[string]bool{}
	for _, e := range p.mapping(n, "", "drill", "title", "lab", "workload", "faults", "expect") {
		have[e.key] = true
		switch e.key {
		case "drill":
			p.nameLine = p.line(e.node)
			if v, ok := p.scalar(e); ok {
				if !drillName.MatchString(v) {
					p.fail(e.node, e.field, "want lowercase letters, digits and '-', got %q", v)
				}
				s.Name = v
			}
		case "title":
			s.Title, _ = p.scalar(e)
		case "lab":
			for _, le := range p.mapping(e.node, "lab", "nodes", "persistence", "restart_delay") {
				switch le.key {
				case "nodes":
					s.Lab.Nodes = int(p.integer(le, 1, lab.MaxNodes))
				case "persistence":
					persistence = le
				case "restart_delay":
					s.Lab.RestartDelay = p.duration(le, 0)
				}
			}
		case "workload":
			p.workload(e, s)
		case "faults":
			for _, fe := range p.list(e) {
				s.Faults = append(s.Faults, p.fault(fe))
			}
		case "expect":
			expect = p.mapping(e.node, "expect")
		}
	}
	for _, req := range []string{"drill", "workload", "expect"} {
		if !have[req] && p.err == nil {
			p.fail(n, req, "missing (a drill names itself, its workload and what each guard must show)")
		}
	}
	if p.err != nil {
		return s
	}
	// Per-node persistence needs the node count, whatever the key order.
	s.Lab.Persistence = make([]lab.Persistence, s.Lab.Nodes)
	for i := range s.Lab.Persistence {
		s.Lab.Persistence[i] = lab.PersistAlways
	}
	if persistence.node != nil {
		items := p.list(persistence)
		if len(items) != 1 && len(items) != s.Lab.Nodes {
			p.fail(persistence.node, persistence.field, "give one profile for every node or one per node (%d), got %d", s.Lab.Nodes, len(items))
		}
		for i, it := range items {
			v, ok := p.scalar(it)
			if !ok {
				break
			}
			ps, err := lab.ParsePersistence(v)
			if err != nil {
				p.fail(it.node, it.field, "want always, everysec or none, got %q", v)
				break
			}
			if len(items) == 1 {
				for j := range s.Lab.Persistence {
					s.Lab.Persistence[j] = ps
				}
			} else if i < len(s.Lab.Persistence) {
				s.Lab.Persistence[i] = ps
			}
		}
	}
	p.checkFaults(s)
	for _, e := range expect {
		p.expectations(e, s)
	}
	return s
}

func (p *specParser) workload(e entry, s *Spec) {
	w := &s.Workload
	have := map[string]entry{}
	for _, we := range p.mapping(e.node, "workload", "guards", "rate", "duration", "keys", "hold", "quantity",
		"lock_ttl", "acquire_timeout", "node_timeout", "replicas", "stock", "seed") {
		have[we.key] = we
		switch we.key {
		case "guards":
			for _, ge := range p.list(we) {
				v, ok := p.scalar(ge)
				if !ok {
					break
				}
				g, err := inventory.ParseGuard(v)
				if err != nil {
					p.fail(ge.node, ge.field, "unknown guard %q (want one of %s)", v, guardNames())
					break
				}
				if contains(w.Guards, g) {
					p.fail(ge.node, ge.field, "guard %s listed twice", g)
				}
				w.Guards = append(w.Guards, g)
			}
		case "rate":
			w.Rate = p.number(we, 0.1, maxRatePerGuard)
		case "duration":
			w.Duration = p.duration(we, time.Second)
			if w.Duration > maxDrillDuration {
				p.fail(we.node, we.field, "at most %v", maxDrillDuration)
			}
		case "keys":
			if v, ok := p.scalar(we); ok {
				k, err := loadgen.ParseKeys(v)
				if err != nil {
					p.fail(we.node, we.field, "%s", trimPkg(err))
				}
				w.Keys = k
			}
		case "hold":
			if v, ok := p.scalar(we); ok {
				h, err := loadgen.ParseHold(v)
				if err != nil {
					p.fail(we.node, we.field, "%s", trimPkg(err))
				}
				w.Hold = h
			}
		case "quantity":
			if v, ok := p.scalar(we); ok {
				q, err := loadgen.ParseQuantity(v)
				if err != nil {
					p.fail(we.node, we.field, "%s", trimPkg(err))
				}
				w.Quantity = q
			}
		case "lock_ttl":
			w.LockTTL = p.duration(we, time.Millisecond)
		case "acquire_timeout":
			w.AcquireTimeout = p.duration(we, time.Millisecond)
		case "node_timeout":
			w.NodeTimeout = p.duration(we, time.Millisecond)
		case "replicas":
			w.Replicas = int(p.integer(we, 1, 64))
		case "stock":
			w.Stock = p.integer(we, 1, inventory.MaxStock)
		case "seed":
			w.Seed = uint64(p.integer(we, 0, math.MaxInt64))
		}
	}
	for _, req := range []string{"guards", "rate", "duration"} {
		if _, ok := have[req]; !ok {
			p.fail(e.keyNode, "workload."+req, "missing")
		}
	}
}

func guardNames() string {
	var names []string
	for _, g := range inventory.Guards() {
		names = append(names, string(g))
	}
	return strings.Join(names, ", ")
}

func trimPkg(err error) string {
	s := err.Error()
	for _, pre := range []string{"loadgen: ", "lab: ", "inventory: "} {
		s = strings.TrimPrefix(s, pre)
	}
	return s
}

func (p *specParser) fault(e entry) Fault {
	f := Fault{Line: p.line(e.node), Count: 1}
	have := map[string]entry{}
	for _, fe := range p.mapping(e.node, e.field, "at", "fault", "nodes", "for", "delay", "add", "jitter", "by", "factor", "guards", "count") {
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
				g, err := inventory.ParseGuard(v)
				if err != nil {
					p.fail(ge.node, ge.field, "unknown guard %q (want one of %s)", v, guardNames())
					break
				}
				f.Guards = append(f.Guards, g)
			}
		case "count":
			f.Count = int(p.integer(fe, 1, 1000))
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
	_, hasFor := have["for"]
	switch {
	case k.nodes && !hasNodes:
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
	}
	sort.SliceStable(s.Faults, func(i, j int) bool { return s.Faults[i].At < s.Faults[j].At })
}

func (p *specParser) expectations(e entry, s *Spec) {
	g, err := inventory.ParseGuard(e.key)
	if err != nil || !contains(s.Workload.Guards, g) {
		p.fail(e.keyNode, e.field, "not a guard of this drill's workload (%s)", joinGuards(s.Workload.Guards))
		return
	}
	items := p.list(e)
	if len(items) == 0 {
		p.fail(e.keyNode, e.field, "no expectations: a drill states what each guard it names must show")
	}
	for _, it := range items {
		v, ok := p.scalar(it)
		if !ok {
			return
		}
		x, err := ParseExpectation(v, s.Lab.Nodes)
		if err != nil {
			p.fail(it.node, it.field, "%s", trimPkg(err))
			return
		}
		x.Line = p.line(it.node)
		s.Expect[g] = append(s.Expect[g], x)
	}
}

func joinGuards(gs []inventory.Guard) string {
	s := make([]string, len(gs))
	for i, g := range gs {
		s[i] = string(g)
	}
	return strings.Join(s, ", ")
}

var (
	nodeMetricRE = regexp.MustCompile(`^node(\d+)\.`)
	opValueRE    = regexp.MustCompile(`^\s*(<=|>=|==|!=|<|>)\s*(\S+)\s*$`)
	relativeRE   = regexp.MustCompile(`^([a-z0-9_.]+)\s*(<=|>=|==|!=|<|>)\s*([0-9]+(?:\.[0-9]+)?)\*((before|during|after)\.)?([a-z0-9_.]+)\s*$`)
)

// parseMetric parses a metric name with the threshold grammar, giving it a
// stand-in value of the right kind.
func parseMetric(metric, op string) (loadgen.Threshold, error) {
	t, err := loadgen.ParseThreshold(metric + op + "0s")
	if err != nil {
		t, err = loadgen.ParseThreshold(metric + op + "0")
	}
	if err != nil {
		return t, fmt.Errorf("unknown metric %q", metric)
	}
	return t, nil
}

// ParseExpectation parses one expectation against a lab of nodes nodes.
func ParseExpectation(expr string, nodes int) (Expectation, error) {
	x := Expectation{Expr: strings.TrimSpace(expr)}
	rest := x.Expr
	for _, ph := range Phases {
		if r, ok := strings.CutPrefix(rest, string(ph)+"."); ok {
			x.Phase, rest = ph, r
			break
		}
	}
	if r, ok := strings.CutPrefix(rest, "grants"); ok && x.Phase != PhaseAll && (r == "" || strings.ContainsAny(r[:1], "<>=! ")) {
		// Borrow the threshold grammar for the operator and the count.
		t, err := loadgen.ParseThreshold("requests" + r)
		if err != nil {
			return x, fmt.Errorf("expectation %q: want %s.grants OP COUNT", expr, x.Phase)
		}
		x.Threshold, x.Grants = t, true
		return x, nil
	}
	if r, ok := strings.CutPrefix(rest, "recovery"); ok && x.Phase == PhaseAll && r != "" && strings.ContainsAny(r[:1], "<>=! ") {
		m := opValueRE.FindStringSubmatch(r)
		if m == nil {
			return x, fmt.Errorf("expectation %q: want recovery OP DURATION, like recovery<2s", expr)
		}
		d, err := time.ParseDuration(m[2])
		if err != nil {
			return x, fmt.Errorf("expectation %q: recovery is a duration: give a unit, like 2s", expr)
		}
		x.Threshold = loadgen.Threshold{Expr: x.Expr, Metric: "recovery", Op: m[1], Value: float64(d)}
		x.Recovery = true
		return x, nil
	}
	if m := relativeRE.FindStringSubmatch(rest); m != nil {
		// METRIC OP K*[PHASE.]METRIC2: parse both sides with the threshold
		// grammar and a stand-in value.
		metric, op, factor, refPhase, refMetric := m[1], m[2], m[3], Phase(m[5]), m[6]
		lhs, err := parseMetric(metric, op)
		if err != nil {
			return x, fmt.Errorf("expectation %q: %w", expr, err)
		}
		ref, err := parseMetric(refMetric, ">")
		if err != nil {
			return x, fmt.Errorf("expectation %q: %w", expr, err)
		}
		if refPhase == PhaseAll {
			refPhase = x.Phase
		}
		if strings.HasPrefix(metric, "safety.") || strings.HasPrefix(refMetric, "safety.") {
			return x, fmt.Errorf("expectation %q: safety counts take a plain number", expr)
		}
		k, _ := strconv.ParseFloat(factor, 64)
		lhs.Expr = x.Expr
		x.Threshold, x.Ref, x.Refs, x.Factor = lhs, &ref, refPhase, k
		return x, nil
	}
	if m := nodeMetricRE.FindStringSubmatch(rest); m != nil {
		if n, _ := strconv.Atoi(m[1]); n > nodes {
			return x, fmt.Errorf("expectation %q: node%d is out of range: the lab has nodes 1-%d", expr, n, nodes)
		}
	}
	if x.Phase != PhaseAll && strings.HasPrefix(rest, "safety.") {
		return x, fmt.Errorf("expectation %q: safety counts are judged on the whole drill (drop %q)", expr, string(x.Phase)+".")
	}
	t, err := loadgen.ParseThreshold(rest)
	if err != nil {
		return x, err
	}
	x.Threshold = t
	return x, nil
}

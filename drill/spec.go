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
// front matter of a runbook (runbooks/drills/<name>.md):
//
//	drill: NAME                      # = the file name without .md
//	title: ONE LINE
//	lab: {nodes: 5,                  # 1-99
//	      persistence: always,       # always | everysec | none, or one per node: [always, everysec, ...]
//	      restart_delay: 5s,         # after a crash; 0s restarts at once
//	      replicas: 0,               # 1: every node gets an asynchronous replica (the failover fault)
//	      etcd: 0}                   # 0, 1, 3 or 5 etcd members (the etcd guards need them)
//	workload: {guards: [redlock, ...],   # Guards and Comparisons (redlock-del)
//	           rate: 20, duration: 30s,  # per guard; every guard at once, own keys and store
//	           keys: uniform:30, hold: uniform:5s:9s, quantity: 1,
//	           lock_ttl: 10s, acquire_timeout: 3s,
//	           node_timeout: 50ms,       # a duration, or default (the guard's library default)
//	           guard_options: {redsync: {node_timeout: default}},  # per guard, over the above
//	           replicas: 2, stock: 1000000, seed: 1}
//	faults:
//	  - {at: 10s, fault: KIND, nodes: [3, 4, 5], ...}   # see FaultKind for each kind's fields
//	  - {at: 12s, fault: kill, etcd: leader}            # or etcd: [1, 2]; see drill/etcd.go
//	windows: {healthy: 2s-10s, slow: 12s-20s}          # named phases of the load, optional
//	expect:
//	  GUARD: ["safety.lock_violations>0", "during.acquire.p99<=2*before.acquire.p99", ...]
//
// node_timeout "default" is redlock's DefaultNodeTimeout for the guards
// built on this repository's Redlock client and redis-single, and go-redis's
// own defaults for redsync (as its users run it). guard_options overrides
// the workload's node_timeout for one guard; its keys must be guards of the
// workload.
//
// The phases before, during and after split the load at the first fault's
// start and the last fault's end. windows adds named phases FROM-TO (from
// the start of the load) for a run with more than one faulty stretch: an
// expectation prefixed by a window's name is judged on the operations due
// in it and the locks granted in it, like one prefixed by a phase. A window
// may overlap the others; its name must not be a phase or a metric's.
//
// Every error names the file, the line and the field (SpecError).
type Spec struct {
	// Name is the drill's name; it equals the runbook's file name without
	// ".md".
	Name string
	// Title is a one-line description for the matrix.
	Title    string
	Lab      LabSpec
	Workload Workload
	Faults   []Fault
	// Windows are the spec's named phases, in the spec's order.
	Windows []Window
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
	// Replicas is 0 (independent nodes) or 1 (an asynchronous replica per
	// node, which the failover fault promotes).
	Replicas int
	// Machines runs the drill on a lab of systemd-nspawn machines
	// (lab.Config.Machines) instead of processes.
	Machines bool
	// Etcd is the number of etcd members next to the nodes (lab.Config.Etcd).
	Etcd int
}

// Window is a named phase of a drill: [From, To) from the start of the load.
type Window struct {
	Name     Phase
	From, To time.Duration
	Line     int
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
	// NodeTimeout is every guard's per-node timeout (0: its library's
	// default), unless GuardNodeTimeout names the guard.
	NodeTimeout time.Duration
	// GuardNodeTimeout overrides NodeTimeout per guard (0: the default).
	GuardNodeTimeout map[inventory.Guard]time.Duration
	Replicas         int
	Stock            int64
	Seed             uint64
}

// NodeTimeoutOf is guard g's per-node timeout; 0 is its library's default.
func (w Workload) NodeTimeoutOf(g inventory.Guard) time.Duration {
	if d, ok := w.GuardNodeTimeout[g]; ok {
		return d
	}
	return w.NodeTimeout
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

// windowName is what a window may be called; reservedNames are what it
// may not (the phases, and the first word of every metric an expectation
// may start with).
var (
	windowName    = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
	reservedNames = func() map[string]bool {
		m := map[string]bool{"grants": true, "recovery": true}
		for _, ph := range Phases {
			m[string(ph)] = true
		}
		for _, h := range loadgen.MetricHeads() {
			m[h] = true
		}
		return m
	}()
	nodeName = regexp.MustCompile(`^node[0-9]+$`)
)

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
	// Threshold is the parsed condition without its phase prefix, for a
	// figure of the load generator's.
	Threshold loadgen.Threshold
	// Grants and Recovery are the drill's own figures, held to Cmp.
	Grants   bool
	Recovery bool
	Cmp      loadgen.Comparison
	// Ref, when set, makes the expectation relative: Metric Cmp.Op Factor
	// times Ref's figure in phase Refs.
	Metric loadgen.Metric
	Ref    *loadgen.Metric
	Refs   Phase
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
	// guardOptions are workload.guard_options' entries, checked against
	// the workload's guards once it is read.
	guardOptions []guardOption
	// guardsLine and etcdLine are workload.guards' and lab.etcd's lines.
	guardsLine, etcdLine int
}

type guardOption struct {
	guard   inventory.Guard
	field   string
	keyNode ast.Node
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

func (p *specParser) boolean(e entry) bool {
	s, ok := p.scalar(e)
	if !ok {
		return false
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	}
	p.fail(e.node, e.field, "want true or false, got %q", s)
	return false
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
	var expect, windows []entry
	have := map[string]bool{}
	for _, e := range p.mapping(n, "", "drill", "title", "lab", "workload", "faults", "windows", "expect") {
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
			for _, le := range p.mapping(e.node, "lab", "nodes", "persistence", "restart_delay", "replicas", "machines", "etcd") {
				switch le.key {
				case "nodes":
					s.Lab.Nodes = int(p.integer(le, 1, lab.MaxNodes))
				case "persistence":
					persistence = le
				case "restart_delay":
					s.Lab.RestartDelay = p.duration(le, 0)
				case "replicas":
					s.Lab.Replicas = int(p.integer(le, 0, 1))
				case "machines":
					s.Lab.Machines = p.boolean(le)
				case "etcd":
					p.etcdLine = p.line(le.node)
					s.Lab.Etcd = p.etcdCount(le)
				}
			}
		case "workload":
			p.workload(e, s)
		case "faults":
			for _, fe := range p.list(e) {
				s.Faults = append(s.Faults, p.fault(fe))
			}
		case "windows":
			windows = p.mapping(e.node, "windows")
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
	p.checkEtcd(s)
	for _, e := range windows {
		p.window(e, s)
	}
	p.checkGuardOptions(s)
	for _, e := range expect {
		p.expectations(e, s)
	}
	return s
}

// window parses one named window, NAME: FROM-TO.
func (p *specParser) window(e entry, s *Spec) {
	if p.err != nil {
		return
	}
	name := e.key
	switch {
	case !windowName.MatchString(name):
		p.fail(e.keyNode, e.field, "a window's name is lowercase letters, digits and '_', starting with a letter")
		return
	case reservedNames[name] || nodeName.MatchString(name):
		p.fail(e.keyNode, e.field, "%q is a phase or a metric's name: choose another", name)
		return
	}
	v, ok := p.scalar(e)
	if !ok {
		return
	}
	from, to, found := strings.Cut(v, "-")
	f, err1 := time.ParseDuration(strings.TrimSpace(from))
	t, err2 := time.ParseDuration(strings.TrimSpace(to))
	switch {
	case !found || err1 != nil || err2 != nil:
		p.fail(e.node, e.field, "want FROM-TO, like 10s-20s, got %q", v)
	case f < 0 || t <= f:
		p.fail(e.node, e.field, "want FROM before TO, got %q", v)
	case s.Workload.Duration > 0 && t > s.Workload.Duration:
		p.fail(e.node, e.field, "%v is past the end of the load (duration %v)", t, s.Workload.Duration)
	default:
		s.Windows = append(s.Windows, Window{Name: Phase(name), From: f, To: t, Line: p.line(e.node)})
	}
}

// checkGuardOptions checks that guard_options names guards of the workload.
func (p *specParser) checkGuardOptions(s *Spec) {
	for _, o := range p.guardOptions {
		if p.err == nil && !contains(s.Workload.Guards, o.guard) {
			p.fail(o.keyNode, o.field, "guard %s is not in workload.guards (%s)", o.guard, inventory.JoinGuards(s.Workload.Guards))
		}
	}
}

func (p *specParser) workload(e entry, s *Spec) {
	w := &s.Workload
	have := map[string]entry{}
	for _, we := range p.mapping(e.node, "workload", "guards", "rate", "duration", "keys", "hold", "quantity",
		"lock_ttl", "acquire_timeout", "node_timeout", "guard_options", "replicas", "stock", "seed") {
		have[we.key] = we
		switch we.key {
		case "guards":
			p.guardsLine = p.line(we.node)
			for _, ge := range p.list(we) {
				v, ok := p.scalar(ge)
				if !ok {
					break
				}
				g, err := inventory.ParseAnyGuard(v)
				if err != nil {
					p.fail(ge.node, ge.field, "unknown guard %q (want one of %s)", v, inventory.JoinGuards(append(inventory.Guards(), inventory.Comparisons()...)))
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
			w.NodeTimeout = p.nodeTimeout(we)
		case "guard_options":
			for _, ge := range p.mapping(we.node, we.field) {
				g, err := inventory.ParseAnyGuard(ge.key)
				if err != nil {
					p.fail(ge.keyNode, ge.field, "unknown guard %q (want one of %s)", ge.key, inventory.JoinGuards(append(inventory.Guards(), inventory.Comparisons()...)))
					break
				}
				p.guardOptions = append(p.guardOptions, guardOption{guard: g, field: ge.field, keyNode: ge.keyNode})
				for _, oe := range p.mapping(ge.node, ge.field, "node_timeout") {
					if w.GuardNodeTimeout == nil {
						w.GuardNodeTimeout = map[inventory.Guard]time.Duration{}
					}
					w.GuardNodeTimeout[g] = p.nodeTimeout(oe)
				}
			}
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

// nodeTimeout is a duration of at least 1ms, or "default" (0).
func (p *specParser) nodeTimeout(e entry) time.Duration {
	v, ok := p.scalar(e)
	if !ok || v == "default" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Millisecond {
		p.fail(e.node, e.field, "want a duration of at least 1ms, like 50ms, or default, got %q", v)
		return 0
	}
	return d
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
	sort.SliceStable(s.Faults, func(i, j int) bool { return s.Faults[i].At < s.Faults[j].At })
}

func (p *specParser) expectations(e entry, s *Spec) {
	g, err := inventory.ParseAnyGuard(e.key)
	if err != nil || !contains(s.Workload.Guards, g) {
		p.fail(e.keyNode, e.field, "not a guard of this drill's workload (%s)", inventory.JoinGuards(s.Workload.Guards))
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
		x, err := ParseExpectation(v, s.Lab.Nodes, s.windowNames()...)
		if err != nil {
			p.fail(it.node, it.field, "%s", trimPkg(err))
			return
		}
		x.Line = p.line(it.node)
		s.Expect[g] = append(s.Expect[g], x)
	}
}

var (
	nodeMetricRE = regexp.MustCompile(`^node(\d+)\.`)
	relativeRE   = regexp.MustCompile(`^([a-z0-9_.]+)\s*(<=|>=|==|!=|<|>)\s*([0-9]+(?:\.[0-9]+)?)\*([a-z0-9_.]+)\s*$`)
)

// windowNames are the names of the spec's windows.
func (s *Spec) windowNames() []Phase {
	out := make([]Phase, len(s.Windows))
	for i, w := range s.Windows {
		out[i] = w.Name
	}
	return out
}

// cutPhase splits a phase or window prefix ("during.", "slow.") off rest.
func cutPhase(rest string, windows []Phase) (Phase, string) {
	for _, ph := range append(append([]Phase{}, Phases...), windows...) {
		if r, ok := strings.CutPrefix(rest, string(ph)+"."); ok {
			return ph, r
		}
	}
	return PhaseAll, rest
}

// ParseExpectation parses one expectation against a lab of nodes nodes and
// the spec's windows (named phases a prefix may name besides before,
// during and after).
func ParseExpectation(expr string, nodes int, windows ...Phase) (Expectation, error) {
	x := Expectation{Expr: strings.TrimSpace(expr)}
	var rest string
	x.Phase, rest = cutPhase(x.Expr, windows)
	if r, ok := strings.CutPrefix(rest, "grants"); ok && x.Phase != PhaseAll && (r == "" || strings.ContainsAny(r[:1], "<>=! ")) {
		c, err := loadgen.ParseComparison(r, false)
		if err != nil {
			return x, fmt.Errorf("expectation %q: want %s.grants OP COUNT", expr, x.Phase)
		}
		x.Cmp, x.Grants = c, true
		return x, nil
	}
	if r, ok := strings.CutPrefix(rest, "recovery"); ok && x.Phase == PhaseAll && r != "" && strings.ContainsAny(r[:1], "<>=! ") {
		if _, err := loadgen.ParseComparison(r, false); err == nil {
			return x, fmt.Errorf("expectation %q: recovery is a duration: give a unit, like 2s", expr)
		}
		c, err := loadgen.ParseComparison(r, true)
		if err != nil {
			return x, fmt.Errorf("expectation %q: want recovery OP DURATION, like recovery<2s", expr)
		}
		x.Cmp, x.Recovery = c, true
		return x, nil
	}
	if m := relativeRE.FindStringSubmatch(rest); m != nil {
		// METRIC OP K*[PHASE.]METRIC2: two metrics of the threshold grammar.
		refPhase, refMetric := cutPhase(m[4], windows)
		lhs, err := loadgen.ParseMetric(m[1])
		if err != nil {
			return x, fmt.Errorf("expectation %q: %w", expr, err)
		}
		ref, err := loadgen.ParseMetric(refMetric)
		if err != nil {
			return x, fmt.Errorf("expectation %q: %w", expr, err)
		}
		if refPhase == PhaseAll {
			refPhase = x.Phase
		}
		if lhs.IsSafety() || ref.IsSafety() {
			return x, fmt.Errorf("expectation %q: safety counts take a plain number", expr)
		}
		k, _ := strconv.ParseFloat(m[3], 64)
		x.Metric, x.Cmp.Op, x.Ref, x.Refs, x.Factor = lhs, m[2], &ref, refPhase, k
		return x, nil
	}
	if m := nodeMetricRE.FindStringSubmatch(rest); m != nil {
		if n, _ := strconv.Atoi(m[1]); n > nodes {
			return x, fmt.Errorf("expectation %q: node%d is out of range: the lab has nodes 1-%d", expr, n, nodes)
		}
	}
	t, err := loadgen.ParseThreshold(rest)
	if err != nil {
		return x, err
	}
	if x.Phase != PhaseAll && t.ParsedMetric().IsSafety() {
		return x, fmt.Errorf("expectation %q: safety counts are judged on the whole drill (drop %q)", expr, string(x.Phase)+".")
	}
	x.Threshold = t
	return x, nil
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

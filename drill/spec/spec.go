// Package spec is the drill spec language: reading a runbook's YAML front
// matter into a Spec (every error with its file, line and field),
// validating it against the fault catalogue, the lab's rules and the
// load's grammar, and writing a Spec back out as a runbook (Format). It
// imports neither the lab nor the load engine, so that programs that write
// specs (an explorer, a planner) need neither.
package spec

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen/loadspec"
)

// Spec is one drill: the lab it needs, the load every guard runs, the faults
// on their schedule and what each guard is expected to show. It is the YAML
// front matter of a runbook (runbooks/drills/<name>.md):
//
//	drill: NAME                      # = the file name without .md
//	title: ONE LINE
//	lab: {nodes: 5,                  # 1-99
//	      persistence: always,       # always | everysec | no-fsync | none, or one per node: [always, everysec, ...]
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
// start and the last fault's end: of the faults that reach the guard
// judged (Reach: a guard of the Redis nodes is judged on the faults of the
// nodes, an etcd guard on those of its members, each guard on the pauses
// of its own holders), or of all of them for a guard none reaches (a
// control). windows adds named phases FROM-TO (from
// the start of the load) for a run with more than one faulty stretch: an
// expectation prefixed by a window's name is judged on the operations due
// in it and the locks granted in it, like one prefixed by a phase. A window
// may overlap the others; its name must not be a phase or a metric's.
//
// Every error names the file, the line and the field (Error).
type Spec struct {
	// Name is the drill's name; it equals the runbook's file name without
	// ".md".
	Name string
	// Title is a one-line description for the matrix.
	Title string
	// Lab is the lab the drill runs on (package profile: its rules are
	// the lab's).
	Lab      profile.Profile
	Workload Workload
	Faults   []Fault
	// Windows are the spec's named phases, in the spec's order.
	Windows []Window
	// Expect holds each guard's expectations, in the spec's order.
	Expect map[inventory.Guard][]Expectation
	// File is where the spec was read from.
	File string
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
	Keys           loadspec.KeySpec
	Hold           loadspec.HoldSpec
	Quantity       loadspec.QuantitySpec
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
		for _, h := range loadspec.MetricHeads() {
			m[h] = true
		}
		return m
	}()
	nodeName = regexp.MustCompile(`^node[0-9]+$`)
)

// Error is a spec that cannot run: it names the file, the line and the
// field.
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *Error) Error() string {
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

// ErrInvalid is wrapped by every Error.
var ErrInvalid = errors.New("drill: invalid spec")

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *Error) Unwrap() error { return ErrInvalid }

// Defaults of a spec.
const (
	DefaultNodes         = profile.DefaultNodes
	DefaultReplicas      = 2
	DefaultStock         = 1_000_000
	DefaultSeed          = 1
	maxDrillDuration     = 30 * time.Minute
	maxRatePerGuard      = 2000
	frontMatterDelimiter = "---"
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
		return nil, &Error{File: name, Line: 1, Msg: err.Error()}
	}
	f, err := parser.ParseBytes(fm, 0)
	if err != nil {
		return nil, &Error{File: name, Line: yamlErrorLine(err, first), Msg: "YAML: " + firstLine(err.Error())}
	}
	if len(f.Docs) != 1 || f.Docs[0].Body == nil {
		return nil, &Error{File: name, Line: first, Msg: "the front matter holds no YAML mapping"}
	}
	p := &specParser{file: name, offset: first - 1, labLines: map[string]int{}}
	s := p.spec(f.Docs[0].Body)
	if p.err != nil {
		return nil, p.err
	}
	s.File = name
	if base := strings.TrimSuffix(filepath.Base(name), ".md"); filepath.Ext(name) == ".md" && s.Name != base {
		return nil, &Error{File: name, Line: p.nameLine, Field: "drill", Msg: fmt.Sprintf("%q does not match the file name %q: a drill's runbook is <drill>.md", s.Name, base+".md")}
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

func (p *specParser) spec(n ast.Node) *Spec {
	s := &Spec{
		Lab: profile.Profile{Nodes: DefaultNodes},
		Workload: Workload{
			Keys: loadspec.KeySpec{Kind: "uniform", N: 100}, Quantity: loadspec.QuantitySpec{Min: 1, Max: 1},
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
			p.labLine = p.line(e.keyNode)
			persistence = p.lab(e, &s.Lab)
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
	p.persistence(persistence, &s.Lab)
	p.checkLab(s)
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

// labFields are the keys of a spec's lab: block: the profile's fields (ssh
// is not one: a drill's hosts come from --hosts).
var labFields = []string{"nodes", "persistence", "restart_delay", "replicas", "machines", "etcd", "etcd_unsafe_no_fsync", "tls", "power_loss"}

// lab reads a lab: block into lab; its persistence entry is read once the
// node count is known (persistence).
func (p *specParser) lab(e entry, lab *profile.Profile) (persistence entry) {
	for _, le := range p.mapping(e.node, "lab", labFields...) {
		p.labLines[le.key] = p.line(le.keyNode)
		switch le.key {
		case "nodes":
			lab.Nodes = int(p.integer(le, 1, profile.MaxNodes))
		case "persistence":
			persistence = le
		case "restart_delay":
			lab.RestartDelay = p.duration(le, 0)
			lab.NoRestartDelay = lab.RestartDelay == 0
		case "replicas":
			lab.Replicas = int(p.integer(le, 0, 1))
		case "machines":
			lab.Machines = p.boolean(le)
		case "tls":
			lab.TLS = p.boolean(le)
		case "etcd":
			lab.Etcd = int(p.integer(le, 0, profile.MaxEtcdMembers))
		case "etcd_unsafe_no_fsync":
			lab.EtcdUnsafeNoFsync = p.boolean(le)
		case "power_loss":
			lab.PowerLoss = p.boolean(le)
		}
	}
	return persistence
}

// persistence reads the lab's persistence entry, one profile or one per
// node.
func (p *specParser) persistence(e entry, lab *profile.Profile) {
	if e.node == nil {
		return
	}
	lab.Persistence = nil
	for _, it := range p.list(e) {
		v, ok := p.scalar(it)
		if !ok {
			break
		}
		ps, err := profile.ParsePersistence(v)
		if err != nil {
			p.fail(it.node, it.field, "want always, everysec, no-fsync or none, got %q", v)
			break
		}
		lab.Persistence = append(lab.Persistence, ps)
	}
}

// ParseLab reads a lab profile written as a spec's lab: block is, like
// {persistence: everysec, restart_delay: 0s}, over base (the fields it
// does not give keep base's), with its defaults filled in. name names the
// text in errors (a flag: "--lab").
func ParseLab(name, text string, base profile.Profile) (profile.Profile, error) {
	f, err := parser.ParseBytes([]byte("lab: "+text+"\n"), 0)
	if err != nil {
		return base, &Error{File: name, Msg: "YAML: " + firstLine(err.Error())}
	}
	if len(f.Docs) != 1 || f.Docs[0].Body == nil {
		return base, &Error{File: name, Msg: "want a mapping like {persistence: everysec, restart_delay: 0s}"}
	}
	p := &specParser{file: name, labLines: map[string]int{}}
	s := &Spec{Lab: base}
	for _, e := range p.mapping(f.Docs[0].Body, "", "lab") {
		p.persistence(p.lab(e, &s.Lab), &s.Lab)
	}
	p.checkLab(s)
	if p.err != nil {
		p.err.Line = 0
		return base, p.err
	}
	return s.Lab, nil
}

// checkLab fills the lab's defaults and holds it to the lab's rules
// (profile.Validate), naming the field's line.
func (p *specParser) checkLab(s *Spec) {
	if p.err != nil {
		return
	}
	prof, err := s.Lab.WithDefaults()
	var pe *profile.Error
	switch {
	case errors.As(err, &pe):
		line, ok := p.labLines[pe.Field]
		if !ok {
			line = p.labLine
		}
		p.err = &Error{File: p.file, Line: line, Field: "lab." + pe.Field, Msg: pe.Rule}
	case err != nil:
		p.err = &Error{File: p.file, Line: p.labLine, Field: "lab", Msg: err.Error()}
	default:
		s.Lab = prof
	}
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
			w.Guards = p.guards(we)
		case "rate":
			w.Rate = p.number(we, 0.1, maxRatePerGuard)
		case "duration":
			w.Duration = p.duration(we, time.Second)
			if w.Duration > maxDrillDuration {
				p.fail(we.node, we.field, "at most %v", maxDrillDuration)
			}
		case "keys":
			if v, ok := p.scalar(we); ok {
				k, err := loadspec.ParseKeys(v)
				if err != nil {
					p.fail(we.node, we.field, "%s", trimPkg(err))
				}
				w.Keys = k
			}
		case "hold":
			if v, ok := p.scalar(we); ok {
				h, err := loadspec.ParseHold(v)
				if err != nil {
					p.fail(we.node, we.field, "%s", trimPkg(err))
				}
				w.Hold = h
			}
		case "quantity":
			if v, ok := p.scalar(we); ok {
				q, err := loadspec.ParseQuantity(v)
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

// guards reads a list of guard names, each once.
func (p *specParser) guards(e entry) []inventory.Guard {
	var out []inventory.Guard
	for _, ge := range p.list(e) {
		v, ok := p.scalar(ge)
		if !ok {
			break
		}
		g, err := inventory.ParseAnyGuard(v)
		if err != nil {
			p.fail(ge.node, ge.field, "unknown guard %q (want one of %s)", v, inventory.JoinGuards(append(inventory.Guards(), inventory.Comparisons()...)))
			break
		}
		if contains(out, g) {
			p.fail(ge.node, ge.field, "guard %s listed twice", g)
		}
		out = append(out, g)
	}
	return out
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

var (
	nodeMetricRE = regexp.MustCompile(`^node(\d+)\.`)
	relativeRE   = regexp.MustCompile(`^([a-z0-9_.]+)\s*(<=|>=|==|!=|<|>)\s*([0-9]+(?:\.[0-9]+)?)\*([a-z0-9_.]+)\s*$`)
)

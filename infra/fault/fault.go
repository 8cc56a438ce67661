// Package fault is the catalogue of the faults the lab can inject: each
// kind, the parameters it takes with their types and bounds, the targets
// that can apply it, whether it needs a replica, how long it lasts and what
// ends it. It is data (the table in catalogue.go), and every fault surface
// derives from it: the drill spec parser and its timeline, the flags, help
// text and checks of `redlab fault`, and the validation of a node
// supervisor's control endpoint. A value is judged by one function,
// Validate, so a parameter a spec refuses is refused by the CLI and by the
// lab with the same words.
//
// What a fault is applied on (a lab node run as a process or as a
// machine, an etcd member, the service process, a host over SSH) is a
// Target, and every fault is applied through an Injector (inject.go), which
// each target implements once, as a Table of how it applies each kind. A
// new transport is one more Target constant, its name in the Targets of
// the kinds it can apply, and its Table, which the test of implementations
// (CheckImplementations) holds to the catalogue. What injects (a drill's
// timeline, redlab fault) takes any Injector: the transport is offered
// where a user picks where faults go, and nothing else names its kinds.
package fault

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Kind names a fault ("kill", "partition", …). It is also the "fault"
// field of faults.jsonl (package faultlog).
type Kind string

// Target is what applies a fault: the kind of thing a fault acts on, and
// so the transport that carries it.
type Target uint8

// The targets. A new transport is a new constant here, its name in
// targetNames, its column in the catalogue's Targets, and its Table.
const (
	// ProcessNode is a lab node whose redis-server the supervisor runs as a
	// child process (the control endpoint).
	ProcessNode Target = iota + 1
	// MachineNode is a lab node that is a systemd-nspawn machine: its
	// supervisor acts through the machine's systemd.
	MachineNode
	// EtcdMember is an etcd member of the lab, under its own supervisor.
	EtcdMember
	// ServiceProcess is the reservation service holding a lock: the drill
	// freezes its holders (client-pause), in the drill's process or as a
	// `redlab serve` process.
	ServiceProcess
	// SSHHost is a real host of a hosts inventory (package hosts), reached
	// over SSH: its faults are infra/hostfault's command table, a clock
	// jump is a real step of its clock.
	SSHHost
)

var targetNames = map[Target][2]string{ // one, many
	ProcessNode:    {"process node", "process nodes"},
	MachineNode:    {"machine node", "machine nodes"},
	EtcdMember:     {"etcd member", "etcd members"},
	ServiceProcess: {"service process", "service processes"},
	SSHHost:        {"host over SSH", "hosts over SSH"},
}

// String is the target's name in messages ("etcd member").
func (t Target) String() string {
	if s, ok := targetNames[t]; ok {
		return s[0]
	}
	return fmt.Sprintf("target(%d)", uint8(t))
}

func (t Target) plural() string {
	if s, ok := targetNames[t]; ok {
		return s[1]
	}
	return t.String() + "s"
}

// Type is a parameter's type.
type Type uint8

// The parameter types.
const (
	Duration Type = iota + 1 // a Go duration: 10s, 500ms, -2s
	Float                    // a number: 1.5
	Int                      // a whole number
	Names                    // one or more names the caller checks (guards, a scope)
)

// ForRule says what `for` means to a kind.
type ForRule uint8

// The ways a kind takes `for`.
const (
	// NoFor: the kind takes no duration.
	NoFor ForRule = iota
	// ForEnds: `for` is optional; given, the target itself ends the
	// fault after it (a drill's timeline may heal it then too: a heal is
	// idempotent), so a fault outlives no caller that died. Without it
	// the fault lasts until a heal.
	ForEnds
	// ForLasts: `for` is required, and the target ends the fault after it.
	ForLasts
)

// For is the name of the duration parameter (ForRule).
const For = "for"

// Param is one parameter of a kind.
type Param struct {
	Name string
	Type Type
	// Required: the kind needs it (a zero value counts as given).
	Required bool
	// Min and Max bound the value, both inclusive: D for a Duration, N for
	// a Float or an Int. A zero Max is no upper bound.
	Min, Max Value
	// NonZero refuses 0 between Min and Max.
	NonZero bool
	// Step is what a Duration must be a whole multiple of (0: anything).
	Step time.Duration
	// Example is a value for messages and help ("15s", "1.5").
	Example string
	// Usage is the one-line help of the parameter.
	Usage string
}

// Def is one kind of the catalogue.
type Def struct {
	Kind Kind
	// Summary is the one-line help of the kind.
	Summary string
	// Params are the parameters besides `for`, in their order of help.
	Params []Param
	// For is how the kind takes `for`.
	For ForRule
	// Nodes: the kind acts on nodes (or members), which must be given
	// unless NodesOptional.
	Nodes bool
	// NodesOptional: with none given it acts on all of them (heal).
	NodesOptional bool
	// NeedsReplicas: the node must have a replica behind its address.
	NeedsReplicas bool
	// Targets are what can apply it.
	Targets []Target
	// Refuse lists, per target that can apply the kind only in part, what
	// it cannot do: a reason, given the params.
	Refuse map[Target]func(Params) string
	// HealedBy is the kind that ends it ("" when it ends by itself or not
	// at all), and Ends says when it ends, for help text.
	HealedBy Kind
	Ends     string
}

// Param returns the kind's parameter name (for included), and whether it
// has it.
func (d Def) Param(name string) (Param, bool) {
	if name == For && d.For != NoFor {
		return forParam(d.For), true
	}
	for _, p := range d.Params {
		if p.Name == name {
			return p, true
		}
	}
	return Param{}, false
}

// AllParams are the kind's parameters, `for` last when it takes one.
func (d Def) AllParams() []Param {
	ps := append([]Param(nil), d.Params...)
	if d.For != NoFor {
		ps = append(ps, forParam(d.For))
	}
	return ps
}

// Sent are the params the target sees: without the caller's Names.
func (d Def) Sent(p Params) Params {
	out := Params{}
	for name, v := range p {
		if typeOf[name] == Names {
			continue
		}
		out[name] = v
	}
	return out
}

// Can reports whether t can apply the kind (at least in part: see Refuse).
func (d Def) Can(t Target) bool {
	for _, x := range d.Targets {
		if x == t {
			return true
		}
	}
	return false
}

func forParam(r ForRule) Param {
	return Param{Name: For, Type: Duration, Required: r == ForLasts, Min: Value{D: time.Millisecond},
		Example: "15s", Usage: "how long the fault lasts"}
}

// Lookup returns kind's definition.
func Lookup(kind Kind) (Def, bool) {
	d, ok := byKind[kind]
	return d, ok
}

// Defs returns the catalogue, in its order.
func Defs() []Def { return append([]Def(nil), catalogue...) }

// Kinds returns every kind's name, sorted, joined by ", ": for messages.
func Kinds() string {
	names := make([]string, 0, len(catalogue))
	for _, d := range catalogue {
		names = append(names, string(d.Kind))
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// ParamNames returns every parameter name of the catalogue (for included),
// each once, in the catalogue's order.
func ParamNames() []string {
	var out []string
	seen := map[string]bool{}
	for _, d := range catalogue {
		for _, p := range d.AllParams() {
			if !seen[p.Name] {
				seen[p.Name] = true
				out = append(out, p.Name)
			}
		}
	}
	return out
}

// KindsWith returns the kinds that take the parameter name, joined by ", ".
func KindsWith(name string) string {
	var ks []string
	for _, d := range catalogue {
		if _, ok := d.Param(name); ok {
			ks = append(ks, string(d.Kind))
		}
	}
	return strings.Join(ks, ", ")
}

// KindsFor returns the kinds target t can apply, joined by ", ".
func KindsFor(t Target) string {
	var ks []string
	for _, d := range catalogue {
		if d.Can(t) {
			ks = append(ks, string(d.Kind))
		}
	}
	return strings.Join(ks, ", ")
}

// Value is one parameter's value: D for a Duration, N for a Float or an
// Int, Names for Names.
type Value struct {
	D     time.Duration
	N     float64
	Names []string
}

// Params are the parameters given to one fault, by name; a parameter not
// given is absent. Their JSON is an object of durations as Go duration
// strings ("2s") and numbers: the body of a control endpoint's fault
// request.
type Params map[string]Value

// Has reports whether name was given.
func (p Params) Has(name string) bool { _, ok := p[name]; return ok }

// D returns the duration name (0 when absent).
func (p Params) D(name string) time.Duration { return p[name].D }

// N returns the number name (0 when absent).
func (p Params) N(name string) float64 { return p[name].N }

// MarshalJSON renders the params by their types (Names are not sent: they
// are the caller's).
func (p Params) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(p))
	for name, v := range p {
		switch typeOf[name] {
		case Duration:
			m[name] = v.D.String()
		case Float, Int:
			m[name] = v.N
		case Names:
		default:
			return nil, fmt.Errorf("fault: unknown parameter %q", name)
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes; names not in the catalogue
// are ignored (a request may carry more than params).
func (p *Params) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	out := Params{}
	for name, raw := range m {
		switch typeOf[name] {
		case Duration:
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return fmt.Errorf("fault: %s: %w", name, err)
			}
			d, err := time.ParseDuration(s)
			if err != nil {
				return fmt.Errorf("fault: %s: %w", name, err)
			}
			out[name] = Value{D: d}
		case Float, Int:
			var n float64
			if err := json.Unmarshal(raw, &n); err != nil {
				return fmt.Errorf("fault: %s: %w", name, err)
			}
			out[name] = Value{N: n}
		}
	}
	*p = out
	return nil
}

// typeOf is every parameter's type: a name has one type in every kind (the
// catalogue's test holds it to that), so Params' JSON needs no kind.
var typeOf = func() map[string]Type {
	m := map[string]Type{}
	for _, d := range catalogue {
		for _, p := range d.AllParams() {
			m[p.Name] = p.Type
		}
	}
	return m
}()

var byKind = func() map[Kind]Def {
	m := make(map[Kind]Def, len(catalogue))
	for _, d := range catalogue {
		m[d.Kind] = d
	}
	return m
}()

// ErrInvalid is wrapped by every *Error.
var ErrInvalid = errors.New("fault: invalid")

// ErrUnsupported is wrapped by an *Error whose target cannot apply the
// kind (or the kind with these params).
var ErrUnsupported = errors.New("fault: unsupported by the target")

// Error is a fault that cannot be applied as given: it names the kind, the
// parameter (Param; "" when the kind itself, its nodes or its target is
// the problem) and the rule broken.
type Error struct {
	Kind  Kind
	Param string
	// Nodes: the problem is the nodes given or missing.
	Nodes bool
	// Rule is what was wrong, said as the rule: "want a duration from 0s to
	// 1h, got 2h".
	Rule string
	// Unsupported: the target cannot apply it (wraps ErrUnsupported).
	Unsupported bool
}

// Error reads "clock-jump: by: want …" for a parameter, the rule alone
// (which names the kind) otherwise.
func (e *Error) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%s: %s: %s", e.Kind, e.Param, e.Rule)
	}
	return e.Rule
}

// Is makes an *Error match ErrInvalid, or ErrUnsupported when the target
// cannot apply it.
func (e *Error) Is(target error) bool {
	return target == ErrInvalid || (e.Unsupported && target == ErrUnsupported)
}

// Parse reads the text of parameter name of kind ("15s", "1.5") into a
// Value, checking its type only; Validate checks its bounds. An error is an
// *Error naming the parameter.
func Parse(kind Kind, name, text string) (Value, error) {
	d, ok := Lookup(kind)
	if !ok {
		return Value{}, &Error{Kind: kind, Rule: fmt.Sprintf("unknown fault %q (want one of %s)", kind, Kinds())}
	}
	p, ok := d.Param(name)
	if !ok {
		return Value{}, noParam(kind, name)
	}
	return p.Parse(kind, text)
}

// Parse reads text as p's type; kind names the fault in the error.
func (p Param) Parse(kind Kind, text string) (Value, error) {
	fail := func(want string) (Value, error) {
		return Value{}, &Error{Kind: kind, Param: p.Name, Rule: fmt.Sprintf("want %s, got %q", want, text)}
	}
	switch p.Type {
	case Duration:
		d, err := time.ParseDuration(text)
		if err != nil {
			return fail("a duration like " + p.example())
		}
		return Value{D: d}, nil
	case Float:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil || f != f {
			return fail("a number like " + p.example())
		}
		return Value{N: f}, nil
	case Int:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return fail("a whole number like " + p.example())
		}
		return Value{N: float64(n)}, nil
	case Names:
		return Value{Names: strings.Split(text, ",")}, nil
	}
	return fail("a value")
}

func (p Param) example() string {
	if p.Example != "" {
		return p.Example
	}
	return "1"
}

func noParam(kind Kind, name string) *Error {
	if ks := KindsWith(name); ks != "" {
		return &Error{Kind: kind, Param: name, Rule: fmt.Sprintf("%s takes no %s (it applies to %s)", kind, name, ks)}
	}
	return &Error{Kind: kind, Param: name, Rule: "unknown parameter"}
}

// Validate checks a fault of kind with params, to be applied by target:
// every parameter one the kind takes and within its bounds, every required
// one given, the target one that can apply it, and a replica there when it
// needs one (replicas: the node has one). The error is an *Error naming
// the parameter and the rule; nodes are the caller's (Def.Nodes).
func Validate(kind Kind, params Params, target Target, replicas bool) error {
	d, ok := Lookup(kind)
	if !ok {
		return &Error{Kind: kind, Rule: fmt.Sprintf("unknown fault %q (want one of %s)", kind, Kinds())}
	}
	// In the order the kind lists them, so the first error is stable.
	names := make([]string, 0, len(params))
	for name := range params {
		if _, ok := d.Param(name); !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) > 0 {
		return noParam(kind, names[0])
	}
	for _, p := range d.AllParams() {
		v, given := params[p.Name]
		if !given {
			if p.Required {
				return &Error{Kind: kind, Param: p.Name, Rule: fmt.Sprintf("%s needs %s (like %s)", kind, p.Name, p.example())}
			}
			continue
		}
		if rule := p.check(v); rule != "" {
			return &Error{Kind: kind, Param: p.Name, Rule: rule}
		}
	}
	if !d.Can(target) {
		if why := unsupportedOn[kind][target]; why != nil {
			return &Error{Kind: kind, Unsupported: true, Rule: why(params)}
		}
		return &Error{Kind: kind, Unsupported: true, Rule: fmt.Sprintf("%s does not apply to %s (they take %s)", kind, target.plural(), KindsFor(target))}
	}
	if refuse := d.Refuse[target]; refuse != nil {
		if why := refuse(params); why != "" {
			return &Error{Kind: kind, Unsupported: true, Rule: why}
		}
	}
	// The one place that says a failover needs a replica.
	if d.NeedsReplicas && !replicas {
		return &Error{Kind: kind, Rule: fmt.Sprintf("%s promotes a node's replica: the lab needs replicas (lab up --replicas 1; in a drill, lab: {replicas: 1})", kind)}
	}
	return nil
}

// check returns the rule v breaks, or "".
func (p Param) check(v Value) string {
	switch p.Type {
	case Duration:
		return checkDuration(p, v.D)
	case Float, Int:
		return checkNumber(p, v.N)
	}
	return ""
}

func checkDuration(p Param, d time.Duration) string {
	lo, hi := p.Min.D, p.Max.D
	var want string
	switch {
	case hi != 0 && p.NonZero:
		want = fmt.Sprintf("a non-zero duration from %s to %s", Dur(lo), Dur(hi))
	case hi != 0:
		want = fmt.Sprintf("a duration from %s to %s", Dur(lo), Dur(hi))
	case p.NonZero:
		want = fmt.Sprintf("a non-zero duration of at least %s", Dur(lo))
	default:
		want = fmt.Sprintf("a duration of at least %s", Dur(lo))
	}
	if d < lo || (hi != 0 && d > hi) || (p.NonZero && d == 0) {
		return fmt.Sprintf("want %s, got %s", want, Dur(d))
	}
	if p.Step > 0 && d%p.Step != 0 {
		return fmt.Sprintf("want a whole number of %s, got %s (use %s or %s)", Dur(p.Step), d, Dur(d.Truncate(p.Step)), Dur(d.Truncate(p.Step)+p.Step))
	}
	return ""
}

func checkNumber(p Param, n float64) string {
	lo, hi := p.Min.N, p.Max.N
	what := "a number"
	if p.Type == Int {
		what = "a whole number"
	}
	switch {
	case n != n, n < lo, hi != 0 && n > hi, p.Type == Int && n != float64(int64(n)):
		if hi != 0 {
			return fmt.Sprintf("want %s from %g to %g, got %g", what, lo, hi, n)
		}
		return fmt.Sprintf("want %s of at least %g, got %g", what, lo, n)
	}
	return ""
}

// Dur is how the catalogue writes a duration: time.Duration's form without
// the zero minutes and seconds of a round one (1h, 10m, 1m30s).
func Dur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Bounds says a parameter's bounds in words, for help text: "0s..1h",
// "non-zero, -24h..24h", ">= 0.001".
func (p Param) Bounds() string {
	var lo, hi string
	switch p.Type {
	case Duration:
		lo, hi = Dur(p.Min.D), Dur(p.Max.D)
		if p.Max.D == 0 {
			hi = ""
		}
	case Float, Int:
		lo, hi = fmt.Sprint(p.Min.N), fmt.Sprint(p.Max.N)
		if p.Max.N == 0 {
			hi = ""
		}
	default:
		return ""
	}
	s := ">= " + lo
	if hi != "" {
		s = lo + ".." + hi
	}
	if p.NonZero {
		s = "non-zero, " + s
	}
	if p.Step > 0 {
		s += ", whole " + Dur(p.Step)
	}
	return s
}

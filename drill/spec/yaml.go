// The YAML walker of the spec parser: typed reads of mapping entries, each
// keeping the first error with its file position.

package spec

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/redlocklab/redlocklab/inventory"
)

// specParser walks the YAML tree, keeping the first error with its position.
type specParser struct {
	file     string
	offset   int // lines before the front matter
	err      *Error
	nameLine int
	// guardOptions are workload.guard_options' entries, checked against
	// the workload's guards once it is read.
	guardOptions []guardOption
	// guardsLine is workload.guards' line, labLine lab's and labLines
	// each lab field's.
	guardsLine, labLine int
	labLines            map[string]int
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
		p.err = &Error{File: p.file, Line: p.line(n), Field: field, Msg: fmt.Sprintf(format, a...)}
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

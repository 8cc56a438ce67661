// Reading and writing the hosts file: a strict walk of the YAML tree (JSON is
// YAML) that reports the first problem with its line and field.

package hosts

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/redlocklab/redlocklab/internal/atomicfile"
)

// FileError is a problem in a hosts file, with where it is.
type FileError struct {
	File  string
	Line  int    // from 1; 0 when unknown
	Field string // e.g. hosts[2].user; empty for the whole file
	Msg   string
}

func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString("hosts: ")
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads and checks the hosts file at path.
func Load(path string) (*Inventory, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hosts: %w", err)
	}
	return Parse(path, b)
}

// Write stores inv at path as indented JSON, atomically, after checking it
// as Parse would.
func Write(path string, inv *Inventory) error {
	b, err := Marshal(inv)
	if err != nil {
		return err
	}
	if _, err := Parse(path, b); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, b, 0o644)
}

// Marshal returns inv as the indented JSON a hosts file holds.
func Marshal(inv *Inventory) ([]byte, error) {
	b, err := json.MarshalIndent(inv, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("hosts: %w", err)
	}
	return append(b, '\n'), nil
}

var yamlPosRE = regexp.MustCompile(`^\[(\d+):(\d+)\]`)

// Parse reads a hosts file's bytes; name is the file they came from, for
// the errors.
func Parse(name string, b []byte) (*Inventory, error) {
	f, err := parser.ParseBytes(b, 0, parser.AllowDuplicateMapKey()) // ours says which field
	if err != nil {
		line := 0
		if m := yamlPosRE.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
		}
		msg, _, _ := strings.Cut(err.Error(), "\n")
		return nil, &FileError{File: name, Line: line, Msg: "syntax: " + strings.TrimSpace(yamlPosRE.ReplaceAllString(msg, ""))}
	}
	if len(f.Docs) != 1 || f.Docs[0].Body == nil {
		return nil, &FileError{File: name, Line: 1, Msg: `want one mapping with "hosts" (and "drill_environment", "known_hosts")`}
	}
	p := &fileParser{file: name}
	inv := p.inventory(f.Docs[0].Body)
	if p.err != nil {
		return nil, p.err
	}
	return inv, nil
}

type fileParser struct {
	file string
	err  *FileError
}

type entry struct {
	key, field string
	keyNode    ast.Node
	node       ast.Node
}

func line(n ast.Node) int {
	if n == nil || n.GetToken() == nil {
		return 0
	}
	return n.GetToken().Position.Line
}

func (p *fileParser) fail(n ast.Node, field, format string, a ...any) {
	if p.err == nil {
		p.err = &FileError{File: p.file, Line: line(n), Field: field, Msg: fmt.Sprintf(format, a...)}
	}
}

// mapping returns the entries of a mapping node; unknown and repeated keys
// and missing required ones fail.
func (p *fileParser) mapping(n ast.Node, field string, required, optional []string) map[string]entry {
	var values []*ast.MappingValueNode
	switch m := n.(type) {
	case *ast.MappingNode:
		values = m.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{m}
	default:
		p.fail(n, field, "want a mapping of %s", strings.Join(append(append([]string{}, required...), optional...), ", "))
		return nil
	}
	known := append(append([]string{}, required...), optional...)
	out := map[string]entry{}
	for _, mv := range values {
		k := mv.Key.String()
		if s, err := strconv.Unquote(k); err == nil {
			k = s
		}
		sub := k
		if field != "" {
			sub = field + "." + k
		}
		if _, ok := out[k]; ok {
			p.fail(mv.Key, sub, "given twice")
		} else if !isOneOf(k, known) {
			p.fail(mv.Key, sub, "unknown field (want one of %s)", strings.Join(known, ", "))
		}
		out[k] = entry{key: k, field: sub, keyNode: mv.Key, node: mv.Value}
	}
	for _, k := range required {
		if _, ok := out[k]; !ok {
			sub := k
			if field != "" {
				sub = field + "." + k
			}
			p.fail(n, sub, "missing (required)")
		}
	}
	return out
}

func isOneOf(s string, list []string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (p *fileParser) str(e entry) string {
	switch n := e.node.(type) {
	case *ast.StringNode:
		if n.Value == "" {
			p.fail(e.node, e.field, "empty")
		}
		return n.Value
	case *ast.NullNode, nil:
		p.fail(e.keyNode, e.field, "has no value")
	default:
		p.fail(e.node, e.field, "want a string, got %s", e.node.String())
	}
	return ""
}

func (p *fileParser) inventory(n ast.Node) *Inventory {
	m := p.mapping(n, "", []string{"hosts"}, []string{"drill_environment", "known_hosts"})
	inv := &Inventory{}
	if e, ok := m["drill_environment"]; ok {
		b, isBool := e.node.(*ast.BoolNode)
		if !isBool {
			p.fail(e.node, e.field, "want true or false, got %s", e.node.String())
		} else {
			inv.DrillEnvironment = b.Value
		}
	}
	if e, ok := m["known_hosts"]; ok {
		inv.KnownHosts = p.str(e)
	}
	e, ok := m["hosts"]
	if !ok {
		return inv
	}
	seq, isSeq := e.node.(*ast.SequenceNode)
	if !isSeq || len(seq.Values) == 0 {
		p.fail(e.keyNode, e.field, "want a list of at least one host")
		return inv
	}
	seen := map[string]string{}
	for i, v := range seq.Values {
		field := fmt.Sprintf("hosts[%d]", i)
		h := p.host(v, field)
		for _, k := range []struct{ what, v string }{{"address", h.SSHAddress()}, {"redis", h.Redis}, {"name", h.Name}} {
			if k.v == "" || p.err != nil {
				continue
			}
			if prev, dup := seen[k.what+" "+k.v]; dup {
				p.fail(v, field+"."+k.what, "%q is also %s", k.v, prev)
			}
			seen[k.what+" "+k.v] = field
		}
		inv.Hosts = append(inv.Hosts, h)
	}
	return inv
}

func (p *fileParser) host(n ast.Node, field string) Host {
	m := p.mapping(n, field, []string{"address", "redis", "user", "type"}, []string{"name", "port", "key", "instance_id", "own_netns"})
	var h Host
	if p.err != nil {
		return h
	}
	h.Address = p.str(m["address"])
	h.Redis = p.str(m["redis"])
	if p.err == nil {
		if host, port, err := net.SplitHostPort(h.Redis); err != nil || host == "" {
			p.fail(m["redis"].node, m["redis"].field, "want host:port, got %q", h.Redis)
		} else if v, err := strconv.Atoi(port); err != nil || v < 1 || v > 65535 {
			p.fail(m["redis"].node, m["redis"].field, "port must be 1-65535, got %q", port)
		}
	}
	h.User = p.str(m["user"])
	h.Type = Type(p.str(m["type"]))
	if p.err == nil && !isOneOf(string(h.Type), []string{string(VM), string(Machine)}) {
		p.fail(m["type"].node, m["type"].field, "want vm or machine, got %q", h.Type)
	}
	if e, ok := m["port"]; ok {
		_, isInt := e.node.(*ast.IntegerNode)
		port, err := strconv.Atoi(e.node.GetToken().Value)
		if !isInt || err != nil || port < 1 || port > 65535 {
			p.fail(e.node, e.field, "want a port 1-65535, got %s", e.node.String())
		} else {
			h.Port = port
		}
	}
	if e, ok := m["name"]; ok {
		h.Name = p.str(e)
	}
	if e, ok := m["key"]; ok {
		h.Key = p.str(e)
	}
	if e, ok := m["instance_id"]; ok {
		h.InstanceID = p.str(e)
	}
	if e, ok := m["own_netns"]; ok {
		b, isBool := e.node.(*ast.BoolNode)
		switch {
		case !isBool:
			p.fail(e.node, e.field, "want true or false, got %s", e.node.String())
		case b.Value && h.Type != Machine:
			p.fail(e.node, e.field, "only a lab machine (type machine) has a network namespace of its own to mark; a %s's network is its own anyway", h.Type)
		default:
			h.OwnNetns = b.Value
		}
	}
	return h
}

// ExpandHome replaces a leading "~/" in path with the user's home directory.
func ExpandHome(path string) (string, error) {
	rest, ok := strings.CutPrefix(path, "~/")
	if !ok {
		return path, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("hosts: %s: %w", path, err)
	}
	return home + "/" + rest, nil
}

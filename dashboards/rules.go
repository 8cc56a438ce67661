package dashboards

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/prometheus/common/model"
)

// RuleFilesCapped returns RuleFiles with the `for:` of every alerting rule
// longer than forMax set to forMax (0: as they are), so that a short drill
// sees its alerts fire: `redlab lab up --monitoring --alert-for-max`. The
// files are otherwise byte for byte the same.
func RuleFilesCapped(forMax time.Duration) ([]RuleFile, error) {
	files, err := RuleFiles()
	if err != nil || forMax == 0 {
		return files, err
	}
	for i, f := range files {
		if files[i].Data, err = capAlertFor(f.Data, forMax); err != nil {
			return nil, fmt.Errorf("dashboards: %s: %w", f.Name, err)
		}
	}
	return files, nil
}

// capAlertFor returns a rule file with every alerting rule's `for:` longer
// than forMax set to forMax. It finds them in the file's YAML structure
// (the mappings with an `alert` key) and rewrites only their values.
func capAlertFor(data []byte, forMax time.Duration) ([]byte, error) {
	if forMax == 0 {
		return data, nil
	}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, err
	}
	type edit struct {
		line, column int
		old, new     string
	}
	var edits []edit
	var walkErr error
	var walk func(n ast.Node)
	walk = func(n ast.Node) {
		switch n := n.(type) {
		case *ast.DocumentNode:
			walk(n.Body)
		case *ast.SequenceNode:
			for _, v := range n.Values {
				walk(v)
			}
		case *ast.MappingValueNode:
			walk(n.Value)
		case *ast.MappingNode:
			var isAlert bool
			var forValue ast.Node
			for _, kv := range n.Values {
				switch kv.Key.String() {
				case "alert":
					isAlert = true
				case "for":
					forValue = kv.Value
				}
				walk(kv.Value)
			}
			if !isAlert || forValue == nil {
				return
			}
			tok := forValue.GetToken()
			d, err := model.ParseDuration(tok.Value)
			if err != nil {
				walkErr = fmt.Errorf("line %d: for: %q: %w", tok.Position.Line, tok.Value, err)
				return
			}
			if time.Duration(d) > forMax {
				edits = append(edits, edit{tok.Position.Line, tok.Position.Column, tok.Value, model.Duration(forMax).String()})
			}
		}
	}
	for _, doc := range f.Docs {
		walk(doc)
	}
	if walkErr != nil {
		return nil, walkErr
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	for _, e := range edits {
		l := lines[e.line-1]
		at := e.column - 1
		if at < 0 || !bytes.HasPrefix(l[at:], []byte(e.old)) {
			return nil, fmt.Errorf("line %d: for: %q not at column %d", e.line, e.old, e.column)
		}
		lines[e.line-1] = slices.Concat(l[:at], []byte(e.new), l[at+len(e.old):])
	}
	return bytes.Join(lines, nil), nil
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/internal/testenv"
)

// TestNoGoFormInOutput checks the source of every package of this module
// that the redlab binary is built from: no fmt print, and no printf-like
// call (a format string, then ...any), hands a map, a slice or an array to
// a verb or a Print, unless its type has a String or Error method. Go would
// print it as "map[a:1]" or "[a b]", which is not how people write a list;
// the output says "a=1" or "a, b" instead.
func TestNoGoFormInOutput(t *testing.T) {
	testenv.Require(t, "go")
	root := testenv.RepoRoot(t)
	cmd := exec.Command("go", "list", "-export", "-deps", "-json", "./cmd/redlab")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	type listed struct {
		ImportPath, Dir, Export string
		GoFiles                 []string
	}
	exports := map[string]string{}
	var mine []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p struct {
			listed
			Module *struct{ Path string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
		if p.Module != nil && p.Module.Path == "github.com/redlocklab/redlocklab" {
			mine = append(mine, p.listed)
		}
	}
	if len(mine) < 10 {
		t.Fatalf("go list found %d packages of this module in redlab: the listing is wrong", len(mine))
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	found := map[string][]string{} // file, relative to the root -> findings
	for _, p := range mine {
		var files []*ast.File
		for _, f := range p.GoFiles {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, af)
		}
		info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
		if _, err := (&types.Config{Importer: imp}).Check(p.ImportPath, fset, files, info); err != nil {
			t.Fatalf("type-check %s: %v", p.ImportPath, err)
		}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					for _, a := range goFormArgs(info, call) {
						pos := fset.Position(a.Pos())
						rel, _ := filepath.Rel(root, pos.Filename)
						found[rel] = append(found[rel], fmt.Sprintf("%s:%d: %s prints %s in Go's form", rel, pos.Line, types.ExprString(a), info.Types[a].Type))
					}
				}
				return true
			})
		}
	}
	for _, fs := range found {
		for _, f := range fs {
			t.Error(f)
		}
	}
}

// goFormArgs returns the arguments of call that fmt would print in Go's
// form: every argument of a Print, and those of a printf-like call that
// meet a verb other than %T and %p.
func goFormArgs(info *types.Info, call *ast.CallExpr) []ast.Expr {
	var out []ast.Expr
	if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
		if fn, ok := info.Uses[sel.Sel].(*types.Func); ok && fn.Pkg() != nil && fn.Pkg().Path() == "fmt" {
			switch fn.Name() {
			case "Print", "Println", "Sprint", "Sprintln", "Fprint", "Fprintln", "Append", "Appendln":
				for _, a := range call.Args {
					if goForm(info.Types[a].Type) {
						out = append(out, a)
					}
				}
				return out
			}
		}
	}
	sig, ok := info.Types[call.Fun].Type.(*types.Signature)
	if !ok || !sig.Variadic() || sig.Params().Len() < 2 {
		return nil
	}
	last, ok := sig.Params().At(sig.Params().Len() - 1).Type().Underlying().(*types.Slice)
	if !ok {
		return nil
	}
	if it, ok := last.Elem().Underlying().(*types.Interface); !ok || !it.Empty() {
		return nil
	}
	fi := sig.Params().Len() - 2
	if b, ok := sig.Params().At(fi).Type().Underlying().(*types.Basic); !ok || b.Kind() != types.String || len(call.Args) <= fi {
		return nil
	}
	format := info.Types[call.Args[fi]].Value
	if format == nil || format.Kind() != constant.String || call.Ellipsis.IsValid() {
		return nil
	}
	args := call.Args[fi+1:]
	for i, verb := range formatVerbs(constant.StringVal(format)) {
		if i >= len(args) {
			break
		}
		if verb != 'T' && verb != 'p' && goForm(info.Types[args[i]].Type) {
			out = append(out, args[i])
		}
	}
	return out
}

// formatVerbs returns, per argument a format consumes, its verb ('*' for a
// star width or precision). Explicit argument indexes ("%[2]s") end the
// list: what follows is not checked.
func formatVerbs(format string) []rune {
	var out []rune
	rs := []rune(format)
	for i := 0; i < len(rs); i++ {
		if rs[i] != '%' {
			continue
		}
		for i++; i < len(rs) && strings.ContainsRune("+-# 0123456789.*[", rs[i]); i++ {
			switch rs[i] {
			case '[':
				return out
			case '*':
				out = append(out, '*')
			}
		}
		if i < len(rs) && rs[i] != '%' {
			out = append(out, rs[i])
		}
	}
	return out
}

// goForm reports whether fmt prints a value of type t in Go's own form: a
// map, a slice (but bytes) or an array without a String or Error method.
func goForm(t types.Type) bool {
	if t == nil {
		return false
	}
	for _, typ := range []types.Type{t, types.NewPointer(t)} {
		for _, name := range []string{"String", "Error"} {
			if obj, _, _ := types.LookupFieldOrMethod(typ, true, nil, name); obj != nil {
				if _, ok := obj.(*types.Func); ok {
					return false
				}
			}
		}
	}
	switch u := t.Underlying().(type) {
	case *types.Map, *types.Array:
		return true
	case *types.Slice:
		b, ok := u.Elem().Underlying().(*types.Basic)
		return !ok || b.Kind() != types.Byte
	}
	return false
}

// TestFormatVerbs checks the verb parse the check relies on.
func TestFormatVerbs(t *testing.T) {
	for format, want := range map[string]string{
		"%s and %v":        "sv",
		"100%% %d":         "d",
		"%-10s|%*d|%.2f":   "s*df",
		"%[2]s then %s":    "",
		"%5.1f%% of %q %T": "fqT",
	} {
		if got := string(formatVerbs(format)); got != want {
			t.Errorf("formatVerbs(%q) = %q, want %q", format, got, want)
		}
	}
}

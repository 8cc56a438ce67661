package verify

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// The checks `tofu validate` would make with the provider's schema, made
// with the schema cdktf_schema_test.go reads: every resource, data and
// provider block of modules/aws and envs/aws names a type the provider has,
// sets only arguments and nested blocks that type has at that level, gives
// each argument a value of its type where the type is known without
// evaluating references, and sets every required argument and block; and
// every reference to an aws resource's or data source's attribute names one
// its type has (not those read through a for expression's own names).

// metaArgs and metaBlocks are what Terraform itself takes in a block, not the
// provider.
var (
	metaArgs = map[string]map[string]bool{
		"resource": {"count": true, "for_each": true, "depends_on": true, "provider": true},
		"data":     {"count": true, "for_each": true, "depends_on": true, "provider": true},
		"provider": {"alias": true, "version": true},
	}
	metaBlocks = map[string]map[string]bool{
		"resource": {"lifecycle": true, "provisioner": true, "connection": true},
		"data":     {"lifecycle": true},
		"provider": {},
	}
)

// builtinProviders have no schema in the package: terraform_data is
// Terraform's own.
var builtinProviders = map[string]bool{"terraform": true}

// schemaCheck is the outcome of checking one module.
type schemaCheck struct {
	findings []string // one line each, with file and line
	checked  []string // "resource aws_instance.this", ...
	skipped  []string // blocks of a built-in provider
}

// checkSchema checks the resource, data and provider blocks of m against p.
func checkSchema(t *testing.T, p *providerPackage, m *tfModule) schemaCheck {
	t.Helper()
	var c schemaCheck
	for _, b := range m.blocks {
		kind := b.Type
		if _, ok := metaArgs[kind]; !ok {
			continue
		}
		if want := map[bool]int{true: 1, false: 2}[kind == "provider"]; len(b.Labels) != want {
			c.findings = append(c.findings, fmt.Sprintf("%s: %s block with %d labels, want %d", pos(b.DefRange()), kind, len(b.Labels), want))
			continue
		}
		typ, name := b.Labels[0], strings.Join(b.Labels, ".")
		local, _, _ := strings.Cut(typ, "_")
		if kind != "provider" {
			if a, ok := b.Body.Attributes["provider"]; ok {
				if tr, diags := hcl.AbsTraversalForExpr(a.Expr); !diags.HasErrors() {
					local = tr.RootName()
				}
			}
		}
		what := kind + " " + name
		where := pos(b.DefRange()) + ": " + what
		switch {
		case builtinProviders[local]:
			c.skipped = append(c.skipped, what)
			continue
		case local != "aws":
			c.findings = append(c.findings, fmt.Sprintf("%s: provider %q has no schema here; only aws is checked", where, local))
			continue
		}
		body, ok := p.body(t, kind, typ)
		if !ok {
			c.findings = append(c.findings, fmt.Sprintf("%s: %s has no %s type %s", where, p, kind, typ))
			continue
		}
		c.checked = append(c.checked, what)
		c.findings = append(c.findings, checkBody(m, what, b.Body, body, metaArgs[kind], metaBlocks[kind])...)
	}
	c.findings = append(c.findings, checkReferences(t, p, m)...)
	return c
}

// checkReferences checks that every reference to an attribute of an aws
// resource or data source (aws_instance.this[0].private_ip,
// data.aws_ami.debian[0].id, self.vpc_id) names one its type has, and a
// block the module declares.
func checkReferences(t *testing.T, p *providerPackage, m *tfModule) []string {
	t.Helper()
	declared := map[string]bool{}
	for _, b := range m.blocks {
		if b.Type == "resource" || b.Type == "data" {
			declared[b.Type+" "+strings.Join(b.Labels, ".")] = true
		}
	}
	var out []string
	for _, b := range m.blocks {
		// check reads the address of a reference, tr, and the attribute it
		// reads: the step after the address and its literal indexes, or the
		// first of next, the traversal after a computed index or a splat
		// (aws_instance.this[count.index].id, aws_ebs_volume.data[*].id).
		check := func(e hclsyntax.Expression, tr, next hcl.Traversal) {
			kind, typ, name, i := "resource", "", "", 1
			switch root := tr.RootName(); {
			case root == "self" && (b.Type == "resource" || b.Type == "data") && len(b.Labels) == 2:
				kind, typ, name = b.Type, b.Labels[0], b.Labels[1]
			case root == "data":
				kind, typ, name, i = "data", stepName(tr, 1), stepName(tr, 2), 3
			case strings.HasPrefix(root, "aws_"):
				typ, name, i = root, stepName(tr, 1), 2
			default:
				return
			}
			if typ == "" || name == "" {
				return
			}
			what := fmt.Sprintf("%s: reference %s", pos(e.Range()), m.text(e))
			if next == nil && !declared[kind+" "+typ+"."+name] {
				out = append(out, fmt.Sprintf("%s: no %s %s.%s in this module", what, kind, typ, name))
				return
			}
			for ; i < len(tr); i++ {
				if _, ok := tr[i].(hcl.TraverseIndex); !ok {
					break
				}
			}
			attr := stepName(tr, i)
			if next != nil && i == len(tr) {
				attr = stepName(next, 0)
			}
			if body, ok := p.body(t, kind, typ); ok && attr != "" && !body.readable[attr] {
				out = append(out, fmt.Sprintf("%s: %s %s has no attribute %s in %s", what, kind, typ, attr, p))
			}
		}
		walkExprs(b.Body, func(e hclsyntax.Expression) {
			hclsyntax.VisitAll(e, func(n hclsyntax.Node) hcl.Diagnostics {
				switch n := n.(type) {
				case *hclsyntax.ScopeTraversalExpr:
					check(n, n.Traversal, nil)
				case *hclsyntax.RelativeTraversalExpr:
					if ix, ok := n.Source.(*hclsyntax.IndexExpr); ok {
						if st, ok := ix.Collection.(*hclsyntax.ScopeTraversalExpr); ok {
							check(n, st.Traversal, n.Traversal)
						}
					}
				case *hclsyntax.SplatExpr:
					st, ok1 := n.Source.(*hclsyntax.ScopeTraversalExpr)
					rt, ok2 := n.Each.(*hclsyntax.RelativeTraversalExpr)
					if ok1 && ok2 {
						check(n, st.Traversal, rt.Traversal)
					}
				}
				return nil
			})
		})
	}
	return out
}

// stepName is the name of attribute step i of tr, or "".
func stepName(tr hcl.Traversal, i int) string {
	if i < len(tr) {
		if a, ok := tr[i].(hcl.TraverseAttr); ok {
			return a.Name
		}
	}
	return ""
}

// walkExprs calls fn on every attribute's expression in body, nested blocks
// included.
func walkExprs(body *hclsyntax.Body, fn func(hclsyntax.Expression)) {
	for _, name := range sortedKeys(body.Attributes) {
		fn(body.Attributes[name].Expr)
	}
	for _, b := range body.Blocks {
		walkExprs(b.Body, fn)
	}
}

// checkBody checks one level of a block, what ("resource aws_instance.this",
// "resource aws_instance.this.metadata_options"), against its schema; metaA
// and metaB name what Terraform takes at this level besides the schema.
func checkBody(m *tfModule, what string, body *hclsyntax.Body, s *schemaBody, metaA, metaB map[string]bool) []string {
	var out []string
	report := func(r hcl.Range, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s: %s: %s", pos(r), what, fmt.Sprintf(format, args...)))
	}
	for _, name := range sortedKeys(body.Attributes) {
		a := body.Attributes[name]
		sa, ok := s.attrs[name]
		switch {
		case metaA[name]:
		case ok:
			if got, ok := knownType(a.Expr); ok {
				if _, err := convert.Convert(got, sa.typ); err != nil {
					report(a.SrcRange, "%s = %s is %s, want %s", name, m.text(a.Expr), got.Type().FriendlyName(), sa.typ.FriendlyName())
				}
			}
		case s.blocks[name] != nil:
			report(a.SrcRange, "%s is a nested block, not an argument: write %s { ... }", name, name)
		default:
			report(a.SrcRange, "unknown argument %s%s", name, suggest(name, s))
		}
	}
	seen := map[string]int{}
	dynamic := map[string]bool{}
	for _, b := range body.Blocks {
		typ, content := b.Type, b.Body
		if typ == "dynamic" {
			if len(b.Labels) != 1 {
				report(b.DefRange(), "dynamic block with %d labels, want 1", len(b.Labels))
				continue
			}
			typ = b.Labels[0]
			dynamic[typ] = true
			cs := childBlocks(b, "content")
			if len(cs) != 1 {
				report(b.DefRange(), "dynamic %q needs one content block, has %d", typ, len(cs))
				continue
			}
			content = cs[0].Body
		} else if metaB[typ] {
			continue
		} else {
			seen[typ]++
		}
		n, ok := s.blocks[typ]
		switch {
		case ok:
			if n.nesting == nestingOne && seen[typ] == 2 {
				report(b.DefRange(), "%s may appear once", typ)
			}
			out = append(out, checkBody(m, what+"."+typ, content, n.body, nil, nil)...)
		case s.attrs[typ] != nil:
			report(b.DefRange(), "%s is an argument, not a nested block: write %s = ...", typ, typ)
		default:
			report(b.DefRange(), "unknown nested block %s%s", typ, suggest(typ, s))
		}
	}
	for _, name := range sortedKeys(s.attrs) {
		if _, ok := body.Attributes[name]; s.attrs[name].required && !ok {
			report(body.SrcRange, "missing required argument %s (%s)", name, s.attrs[name].typeName)
		}
	}
	for _, name := range sortedKeys(s.blocks) {
		if s.blocks[name].required && seen[name] == 0 && !dynamic[name] {
			report(body.SrcRange, "missing required nested block %s", name)
		}
	}
	return out
}

// knownType evaluates e with every reference unknown, with the functions the
// static tests know: literals, templates, and tuples and objects of them
// come out with their type; ok is false when e cannot be evaluated so (a
// function only Terraform has), and an unknown value converts to any type.
func knownType(e hclsyntax.Expression) (cty.Value, bool) {
	vars := map[string]cty.Value{}
	for _, tr := range e.Variables() {
		vars[tr.RootName()] = cty.DynamicVal
	}
	v, diags := e.Value(&hcl.EvalContext{Variables: vars, Functions: functions})
	return v, !diags.HasErrors()
}

// suggest names the schema's closest name at this level, as Terraform's
// "Did you mean" does.
func suggest(name string, s *schemaBody) string {
	best, bestD := "", 3
	for _, names := range [][]string{sortedKeys(s.attrs), sortedKeys(s.blocks)} {
		for _, n := range names {
			if d := editDistance(name, n); d < bestD {
				best, bestD = n, d
			}
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// pos is file:line of r, the file by its base name.
func pos(r hcl.Range) string {
	return fmt.Sprintf("%s:%d", filepath.Base(r.Filename), r.Start.Line)
}

func TestAWSProviderSchema(t *testing.T) {
	p := openProviderAWS(t)
	for _, dir := range awsRoots(t) {
		c := checkSchema(t, p, parseModule(t, dir))
		for _, f := range c.findings {
			t.Errorf("%s: %s", dir, f)
		}
		if len(c.checked) == 0 {
			t.Errorf("%s: no resource, data or provider block checked against %s", dir, p)
		}
		t.Logf("%s: %d blocks checked against %s: %s; built in, not checked: %v",
			filepath.Base(filepath.Dir(dir))+"/"+filepath.Base(dir), len(c.checked), p, strings.Join(c.checked, ", "), c.skipped)
	}
}

// TestAWSProviderSchemaCatchesMutations breaks modules/aws in memory, one way
// per case, and wants the check to report exactly that.
func TestAWSProviderSchemaCatchesMutations(t *testing.T) {
	p := openProviderAWS(t)
	dir := moduleDir(t, "aws")
	main := filepath.Join(dir, "main.tf")
	pristine := parseModule(t, dir)
	for _, c := range []struct {
		name     string
		from, to string // from "" appends to
		want     string
	}{
		{"misspelled argument", `    http_tokens                 = "required"`, `    http_token                  = "required"`,
			"resource aws_instance.this.metadata_options: unknown argument http_token (did you mean http_tokens?)"},
		{"unknown nested block", "  root_block_device {", "  root_block_devices {",
			"resource aws_instance.this: unknown nested block root_block_devices (did you mean root_block_device?)"},
		{"missing required argument", `  device_name = "/dev/sdf"` + "\n", "",
			"resource aws_volume_attachment.data: missing required argument device_name (string)"},
		{"missing required argument of a nested block", `    name   = "virtualization-type"` + "\n", "",
			"data aws_ami.debian.filter: missing required argument name (string)"},
		{"string where a number is wanted", "http_put_response_hop_limit = 1", `http_put_response_hop_limit = "one"`,
			`resource aws_instance.this.metadata_options: http_put_response_hop_limit = "one" is string, want number`},
		{"string where a bool is wanted", "ebs_optimized               = true", `ebs_optimized               = "yes"`,
			`resource aws_instance.this: ebs_optimized = "yes" is string, want bool`},
		{"string where a list is wanted", `owners      = ["136693071363"]`, `owners      = "136693071363"`,
			`data aws_ami.debian: owners = "136693071363" is string, want list of string`},
		{"a block written as an argument", "  root_block_device {", "  root_block_device = {",
			"resource aws_instance.this: root_block_device is a nested block, not an argument"},
		{"an argument written as a block", "  user_data_replace_on_change = true\n", "  user_data_replace_on_change {}\n",
			"resource aws_instance.this: user_data_replace_on_change is an argument, not a nested block"},
		{"a single block twice", "  metadata_options {", "  metadata_options {\n    http_tokens = \"required\"\n  }\n  metadata_options {",
			"resource aws_instance.this: metadata_options may appear once"},
		{"unknown resource type", "", "resource \"aws_placement_groups\" \"extra\" {}\n",
			"resource aws_placement_groups.extra: " + p.String() + " has no resource type aws_placement_groups"},
		{"unknown data source", "", "data \"aws_ec2_instance_types_x\" \"extra\" {}\n",
			"data aws_ec2_instance_types_x.extra: " + p.String() + " has no data type aws_ec2_instance_types_x"},
		{"reference to an undeclared resource", `resource "aws_placement_group" "this"`, `resource "aws_placement_group" "spread"`,
			"reference aws_placement_group.this.name: no resource aws_placement_group.this in this module"},
		{"a splat's attribute misspelled", "", "output \"extra\" {\n  value = aws_ebs_volume.data[*].volume_id\n}\n",
			"reference aws_ebs_volume.data[*].volume_id: resource aws_ebs_volume has no attribute volume_id"},
		{"dynamic block of an unknown type", "", "resource \"aws_instance\" \"extra\" {\n  dynamic \"ebs_block_devices\" {\n    for_each = []\n    content {}\n  }\n}\n",
			"resource aws_instance.extra: unknown nested block ebs_block_devices (did you mean ebs_block_device?)"},
		{"dynamic block content checked", "", "resource \"aws_instance\" \"extra\" {\n  dynamic \"ebs_block_device\" {\n    for_each = var.x\n    iterator = d\n    content {\n      device_name = d.value\n      volume_size = \"big\"\n    }\n  }\n}\n",
			`resource aws_instance.extra.ebs_block_device: volume_size = "big" is string, want number`},
		{"required argument missing in dynamic content", "", "resource \"aws_instance\" \"extra\" {\n  dynamic \"ebs_block_device\" {\n    for_each = var.x\n    content {}\n  }\n}\n",
			"resource aws_instance.extra.ebs_block_device: missing required argument device_name (string)"},
		{"a computed attribute misspelled in a reference", `condition     = self.hypervisor == "nitro"`, `condition     = self.hypervisors == "nitro"`,
			"reference self.hypervisors: data aws_ec2_instance_type has no attribute hypervisors"},
		{"a resource's attribute misspelled in a reference", "instance_id = aws_instance.this[count.index].id", "instance_id = aws_instance.this[count.index].instance_id",
			"reference aws_instance.this[count.index].instance_id: resource aws_instance has no attribute instance_id"},
		{"a data source's attribute misspelled in a reference", "data.aws_ami.debian[0].id", "data.aws_ami.debian[0].ami_id",
			"reference data.aws_ami.debian[0].ami_id: data aws_ami has no attribute ami_id"},
		{"meta-arguments are not schema", "", "resource \"aws_instance\" \"extra\" {\n  count      = 1\n  depends_on = [aws_ebs_volume.data]\n  provider   = aws.east\n  lifecycle {\n    create_before_destroy = true\n  }\n  monitoring = \"maybe\"\n}\n",
			`resource aws_instance.extra: monitoring = "maybe" is string, want bool`},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := map[string][]byte{}
			for f, b := range pristine.src {
				src[f] = b
			}
			text := string(src[main])
			if c.from == "" {
				text += "\n" + c.to
			} else {
				if n := strings.Count(text, c.from); n != 1 {
					t.Fatalf("main.tf contains %q %d times, want 1", c.from, n)
				}
				text = strings.Replace(text, c.from, c.to, 1)
			}
			src[main] = []byte(text)
			got := checkSchema(t, p, parseSources(t, dir, src)).findings
			if len(got) != 1 || !strings.Contains(got[0], c.want) {
				t.Errorf("findings:\n%s\nwant exactly one, containing %q", strings.Join(got, "\n"), c.want)
			}
		})
	}
}

// TestAWSProviderSchemaReader pins facts of the schema that the reader
// must get right, each of a kind the check depends on.
func TestAWSProviderSchemaReader(t *testing.T) {
	p := openProviderAWS(t)
	for _, c := range []struct {
		kind, typ string
		path      []string // nested blocks, then the argument or block
		want      string   // "arg TYPE [required]" or "block NESTING [required]"
	}{
		{"resource", "aws_instance", []string{"ami"}, "arg string"},
		{"resource", "aws_instance", []string{"get_password_data"}, "arg bool"}, // fetchPasswordData in the .d.ts
		{"resource", "aws_instance", []string{"vpc_security_group_ids"}, "arg set of string"},
		{"resource", "aws_instance", []string{"tags"}, "arg map of string"},
		{"resource", "aws_instance", []string{"arn"}, "absent"}, // computed only
		{"resource", "aws_instance", []string{"metadata_options"}, "block one"},
		{"resource", "aws_instance", []string{"metadata_options", "http_put_response_hop_limit"}, "arg number"},
		{"resource", "aws_instance", []string{"ebs_block_device"}, "block repeated"},
		{"resource", "aws_instance", []string{"ebs_block_device", "device_name"}, "arg string required"},
		{"resource", "aws_instance", []string{"timeouts"}, "block one"},
		{"resource", "aws_volume_attachment", []string{"device_name"}, "arg string required"},
		{"resource", "aws_vpc_security_group_ingress_rule", []string{"security_group_id"}, "arg string required"},
		{"data", "aws_ami", []string{"filter"}, "block repeated"},
		{"data", "aws_ami", []string{"filter", "values"}, "arg set of string required"},
		{"data", "aws_ec2_instance_type", []string{"instance_type"}, "arg string required"},
		{"provider", "aws", []string{"default_tags", "tags"}, "arg map of string"},
		{"provider", "aws", []string{"region"}, "arg string"},
	} {
		name := c.kind + " " + c.typ + " " + strings.Join(c.path, ".")
		b, ok := p.body(t, c.kind, c.typ)
		if !ok {
			t.Errorf("%s: %s has no such type", name, p)
			continue
		}
		for _, step := range c.path[:len(c.path)-1] {
			if n := b.blocks[step]; n != nil {
				b = n.body
			} else {
				b = &schemaBody{}
			}
		}
		last, got := c.path[len(c.path)-1], "absent"
		if a := b.attrs[last]; a != nil {
			got = "arg " + a.typ.FriendlyName()
			if a.required {
				got += " required"
			}
		} else if n := b.blocks[last]; n != nil {
			got = "block " + map[nesting]string{nestingRepeated: "repeated", nestingOne: "one", nestingMap: "map"}[n.nesting]
			if n.required {
				got += " required"
			}
		}
		if got != c.want {
			t.Errorf("%s: got %s, want %s", name, got, c.want)
		}
	}
}

// TestAWSProviderVersionConstraint checks that the provider versions that
// modules/aws and envs/aws admit include the one the schema came from, so
// that the schema checked against is one they may run with.
func TestAWSProviderVersionConstraint(t *testing.T) {
	p := openProviderAWS(t)
	schema, err := version.NewVersion(p.schema)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	for _, dir := range awsRoots(t) {
		v, ok := requiredProviders(t, parseModule(t, dir))["aws"]
		if !ok {
			t.Errorf("%s: required_providers does not declare aws", dir)
			continue
		}
		if src := v.GetAttr("source").AsString(); src != "hashicorp/aws" {
			t.Errorf("%s: aws source %q, want hashicorp/aws", dir, src)
		}
		spec := v.GetAttr("version").AsString()
		cons, err := version.NewConstraint(spec)
		if err != nil {
			t.Errorf("%s: aws version %q: %v", dir, spec, err)
			continue
		}
		if !cons.Check(schema) {
			t.Errorf("%s: aws version %q does not admit %s, the version the schema of %s came from", dir, spec, p.schema, p)
		}
	}
}

package verify

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/tryfunc"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// The AWS module needs the hashicorp/aws provider to init, plan or validate,
// and this machine has no registry: these tests parse it with hcl/v2 and
// check its rules statically, evaluating the validation and placement logic
// with the few Terraform functions it uses. `make validate-aws` runs the real
// `init -backend=false && validate` where a registry is reachable.

// tfModule is the parsed top-level blocks of one module directory.
type tfModule struct {
	dir    string
	blocks []*hclsyntax.Block
	src    map[string][]byte
}

func parseModule(t *testing.T, dir string) *tfModule {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no .tf files in %s: %v", dir, err)
	}
	src := map[string][]byte{}
	for _, f := range files {
		if src[f], err = os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	return parseSources(t, dir, src)
}

// parseSources parses a module from its files' contents (path to source),
// so that a test can parse a changed copy without writing it.
func parseSources(t *testing.T, dir string, src map[string][]byte) *tfModule {
	t.Helper()
	p := hclparse.NewParser()
	m := &tfModule{dir: dir, src: src}
	files := make([]string, 0, len(src))
	for f := range src {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		file, diags := p.ParseHCL(src[f], f)
		if diags.HasErrors() {
			t.Fatalf("parse %s: %v", f, diags)
		}
		m.blocks = append(m.blocks, file.Body.(*hclsyntax.Body).Blocks...)
	}
	return m
}

// find returns the top-level blocks of a type whose labels start with labels.
func (m *tfModule) find(typ string, labels ...string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, b := range m.blocks {
		if b.Type != typ || len(b.Labels) < len(labels) {
			continue
		}
		match := true
		for i, l := range labels {
			match = match && b.Labels[i] == l
		}
		if match {
			out = append(out, b)
		}
	}
	return out
}

func (m *tfModule) one(t *testing.T, typ string, labels ...string) *hclsyntax.Block {
	t.Helper()
	bs := m.find(typ, labels...)
	if len(bs) != 1 {
		t.Fatalf("%s: got %d %s %v blocks, want 1", m.dir, len(bs), typ, labels)
	}
	return bs[0]
}

// text returns the source of an expression, for messages.
func (m *tfModule) text(e hclsyntax.Expression) string {
	r := e.Range()
	if src, ok := m.src[r.Filename]; ok {
		return string(r.SliceBytes(src))
	}
	return r.String()
}

func childBlocks(b *hclsyntax.Block, typ string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, c := range b.Body.Blocks {
		if c.Type == typ {
			out = append(out, c)
		}
	}
	return out
}

// refs lists the references of an expression as "var.x", "module.m.out",
// "each.value", ... (root plus up to two attribute steps).
func refs(e hclsyntax.Expression) []string {
	var out []string
	for _, tr := range e.Variables() {
		parts := []string{tr.RootName()}
		for _, step := range tr[1:] {
			a, ok := step.(hcl.TraverseAttr)
			if !ok || len(parts) == 3 {
				break
			}
			parts = append(parts, a.Name)
		}
		out = append(out, strings.Join(parts, "."))
	}
	return out
}

func hasRef(e hclsyntax.Expression, prefix string) bool {
	for _, r := range refs(e) {
		if r == prefix || strings.HasPrefix(r, prefix+".") {
			return true
		}
	}
	return false
}

// literal evaluates an expression that must not reference anything.
func literal(t *testing.T, m *tfModule, e hclsyntax.Expression) cty.Value {
	t.Helper()
	v, diags := e.Value(nil)
	if diags.HasErrors() {
		t.Fatalf("%s: want a literal, got %s: %v", m.dir, m.text(e), diags)
	}
	return v
}

// functions are the Terraform functions the module's conditions use.
var functions = map[string]function.Function{
	"alltrue":         allTrueFunc,
	"can":             tryfunc.CanFunc,
	"cidrhost":        cidrHostFunc,
	"coalesce":        stdlib.CoalesceFunc,
	"one":             oneFunc,
	"try":             tryfunc.TryFunc,
	"contains":        stdlib.ContainsFunc,
	"distinct":        stdlib.DistinctFunc,
	"floor":           stdlib.FloorFunc,
	"join":            stdlib.JoinFunc,
	"length":          lengthFunc,
	"max":             stdlib.MaxFunc,
	"merge":           stdlib.MergeFunc,
	"min":             stdlib.MinFunc,
	"regex":           stdlib.RegexFunc,
	"regexall":        stdlib.RegexAllFunc,
	"base64gzip":      base64GzipFunc,
	"setintersection": stdlib.SetIntersectionFunc,
	"slice":           stdlib.SliceFunc,
	"strcontains":     strContainsFunc,
	"toset":           toSetFunc,
	"values":          stdlib.ValuesFunc,
}

// oneFunc is Terraform's one: null for an empty list or tuple, its element
// for one element.
var oneFunc = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "list", Type: cty.DynamicPseudoType}},
	Type: func(args []cty.Value) (cty.Type, error) {
		ty := args[0].Type()
		switch {
		case ty.IsListType():
			return ty.ElementType(), nil
		case ty.IsTupleType() && len(ty.TupleElementTypes()) == 1:
			return ty.TupleElementTypes()[0], nil
		case ty.IsTupleType() && len(ty.TupleElementTypes()) == 0:
			return cty.DynamicPseudoType, nil
		}
		return cty.NilType, fmt.Errorf("one: want a list or a tuple of at most one element, got %s", ty.FriendlyName())
	},
	Impl: func(args []cty.Value, ret cty.Type) (cty.Value, error) {
		switch n := args[0].LengthInt(); n {
		case 0:
			return cty.NullVal(ret), nil
		case 1:
			return args[0].Index(cty.NumberIntVal(0)), nil
		default:
			return cty.NilVal, fmt.Errorf("one: %d elements", n)
		}
	},
})

var allTrueFunc = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "list", Type: cty.List(cty.Bool)}},
	Type:   function.StaticReturnType(cty.Bool),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		for it := args[0].ElementIterator(); it.Next(); {
			_, v := it.Element()
			if v.IsNull() || v.False() {
				return cty.False, nil
			}
		}
		return cty.True, nil
	},
})

// lengthFunc is Terraform's length: characters of a string, elements of a
// collection.
var lengthFunc = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "v", Type: cty.DynamicPseudoType}},
	Type:   function.StaticReturnType(cty.Number),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		if args[0].Type() == cty.String {
			return stdlib.Strlen(args[0])
		}
		return stdlib.Length(args[0])
	},
})

var toSetFunc = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "v", Type: cty.DynamicPseudoType}},
	Type: func(args []cty.Value) (cty.Type, error) {
		ety, _ := convert.UnifyUnsafe(tupleTypes(args[0]))
		if ety == cty.NilType {
			return cty.NilType, fmt.Errorf("toset: elements of mixed types")
		}
		return cty.Set(ety), nil
	},
	Impl: func(args []cty.Value, ret cty.Type) (cty.Value, error) {
		return convert.Convert(args[0], ret)
	},
})

func tupleTypes(v cty.Value) []cty.Type {
	var out []cty.Type
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		out = append(out, e.Type())
	}
	if len(out) == 0 {
		out = append(out, cty.String)
	}
	return out
}

// base64GzipFunc is Terraform's base64gzip: gzip, then base64.
var base64GzipFunc = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "s", Type: cty.String}},
	Type:   function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		if _, err := zw.Write([]byte(args[0].AsString())); err != nil {
			return cty.NilVal, err
		}
		if err := zw.Close(); err != nil {
			return cty.NilVal, err
		}
		return cty.StringVal(base64.StdEncoding.EncodeToString(b.Bytes())), nil
	},
})

var strContainsFunc = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "s", Type: cty.String}, {Name: "sub", Type: cty.String}},
	Type:   function.StaticReturnType(cty.Bool),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		return cty.BoolVal(strings.Contains(args[0].AsString(), args[1].AsString())), nil
	},
})

var cidrHostFunc = function.New(&function.Spec{
	Params: []function.Parameter{{Name: "prefix", Type: cty.String}, {Name: "hostnum", Type: cty.Number}},
	Type:   function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		_, network, err := net.ParseCIDR(args[0].AsString())
		if err != nil {
			return cty.NilVal, err
		}
		host, _ := args[1].AsBigFloat().Int(nil)
		ip := new(big.Int).SetBytes(network.IP)
		ip.Add(ip, host)
		out := ip.FillBytes(make([]byte, len(network.IP)))
		if !network.Contains(out) {
			return cty.NilVal, fmt.Errorf("cidrhost: host %v outside %s", host, network)
		}
		return cty.StringVal(net.IP(out).String()), nil
	},
})

// evaluator evaluates expressions of one module with given variables, data
// and resources, resolving locals on demand.
type evaluator struct {
	t      *testing.T
	m      *tfModule
	vars   map[string]cty.Value
	extra  map[string]cty.Value // "data", "aws_instance", ...
	locals map[string]hclsyntax.Expression
	cache  map[string]cty.Value
}

func newEvaluator(t *testing.T, m *tfModule, vars, extra map[string]cty.Value) *evaluator {
	ev := &evaluator{t: t, m: m, vars: vars, extra: extra, locals: map[string]hclsyntax.Expression{}, cache: map[string]cty.Value{}}
	for _, b := range m.find("locals") {
		for name, a := range b.Body.Attributes {
			ev.locals[name] = a.Expr
		}
	}
	return ev
}

func (ev *evaluator) eval(e hclsyntax.Expression) (cty.Value, hcl.Diagnostics) {
	locals := map[string]cty.Value{}
	for _, r := range refs(e) {
		if name, ok := strings.CutPrefix(r, "local."); ok {
			name, _, _ = strings.Cut(name, ".")
			locals[name] = ev.local(name)
		}
	}
	vars := map[string]cty.Value{"var": cty.ObjectVal(ev.vars), "local": cty.ObjectVal(locals)}
	for k, v := range ev.extra {
		vars[k] = v
	}
	return e.Value(&hcl.EvalContext{Variables: vars, Functions: functions})
}

func (ev *evaluator) local(name string) cty.Value {
	if v, ok := ev.cache[name]; ok {
		return v
	}
	e, ok := ev.locals[name]
	if !ok {
		ev.t.Fatalf("%s: local.%s is not defined", ev.m.dir, name)
	}
	v, diags := ev.eval(e)
	if diags.HasErrors() {
		ev.t.Fatalf("%s: evaluate local.%s: %v", ev.m.dir, name, diags)
	}
	ev.cache[name] = v
	return v
}

// validates reports whether every validation block of variable name accepts v.
func validates(t *testing.T, m *tfModule, name string, v cty.Value) bool {
	t.Helper()
	b := m.one(t, "variable", name)
	vals := childBlocks(b, "validation")
	if len(vals) == 0 {
		t.Fatalf("variable %q has no validation block", name)
	}
	ev := newEvaluator(t, m, map[string]cty.Value{name: v}, nil)
	for _, vb := range vals {
		got, diags := ev.eval(vb.Body.Attributes["condition"].Expr)
		if diags.HasErrors() {
			t.Fatalf("variable %q: evaluate %s: %v", name, m.text(vb.Body.Attributes["condition"].Expr), diags)
		}
		if got.False() {
			return false
		}
	}
	return true
}

func strList(ss ...string) cty.Value {
	if len(ss) == 0 {
		return cty.ListValEmpty(cty.String)
	}
	vs := make([]cty.Value, len(ss))
	for i, s := range ss {
		vs[i] = cty.StringVal(s)
	}
	return cty.ListVal(vs)
}

func TestAWSModuleVariables(t *testing.T) {
	m := parseModule(t, moduleDir(t, "aws"))
	for _, b := range m.find("variable") {
		name := b.Labels[0]
		if _, ok := b.Body.Attributes["type"]; !ok {
			t.Errorf("variable %q has no type", name)
		}
		d, ok := b.Body.Attributes["description"]
		if !ok || literal(t, m, d.Expr).AsString() == "" {
			t.Errorf("variable %q has no description", name)
		}
	}

	num := func(f float64) cty.Value { return cty.NumberFloatVal(f) }
	cases := []struct {
		variable string
		value    cty.Value
		want     bool
	}{
		{"node_count", num(5), true},
		{"node_count", num(3), true},
		{"node_count", num(7), true},
		{"node_count", num(4), false},
		{"node_count", num(1), false},
		{"max_lock_ttl", num(30), true},
		{"max_lock_ttl", num(0.5), true},
		{"max_lock_ttl", num(0), false},
		{"max_lock_ttl", num(-10), false},
		{"restart_margin", num(0), true},
		{"restart_margin", num(2.5), true},
		{"restart_margin", num(-1), false},
		{"client_cidrs", strList("10.0.0.0/16"), true},
		{"client_cidrs", strList("10.0.0.0/16", "2001:db8::/32"), true},
		{"client_cidrs", strList("0.0.0.0/0"), false},
		{"client_cidrs", strList("10.0.0.0/16", "::/0"), false},
		{"client_cidrs", strList("10.0.0.300/16"), false},
		{"client_cidrs", strList(), false},
		{"subnet_ids", strList("subnet-0a", "subnet-0b", "subnet-0c", "subnet-0d", "subnet-0e"), true},
		{"subnet_ids", strList("subnet-0a", "subnet-0b", "subnet-0a", "subnet-0d", "subnet-0e"), false},
		{"subnet_ids", strList("subnet-0a", "subnet-0b"), false},
		{"subnet_ids", strList("subnet-0a", "subnet-0b", "sg-0c"), false},
		{"redis_port", num(6379), true},
		{"redis_port", num(0), false},
		{"redlock_password", cty.StringVal("0123456789abcdef"), true},
		{"redlock_password", cty.StringVal("short"), false},
		{"architecture", cty.NullVal(cty.String), true},
		{"architecture", cty.StringVal("arm64"), true},
		{"architecture", cty.StringVal("aarch64"), false},
		{"ntp_poll_exponent", num(4), true},
		{"ntp_poll_exponent", cty.NullVal(cty.Number), true},
		{"ntp_poll_exponent", num(4.5), false},
		{"node_generations", cty.MapValEmpty(cty.Number), true},
		{"node_generations", cty.MapVal(map[string]cty.Value{"0": num(2), "4": num(1)}), true},
		{"node_generations", cty.MapVal(map[string]cty.Value{"node0": num(1)}), false},
		{"node_generations", cty.MapVal(map[string]cty.Value{"0": num(-1)}), false},
		{"data_volume", dataVolume(10, "gp3", nil, nil), true},
		{"data_volume", dataVolume(10, "gp3", ptr(6000.0), ptr(250.0)), true},
		{"data_volume", dataVolume(50, "io2", ptr(20000.0), nil), true},
		{"data_volume", dataVolume(10, "gp2", nil, nil), false},
		{"data_volume", dataVolume(10, "gp3", ptr(1000.0), nil), false},
		{"data_volume", dataVolume(10, "io2", nil, nil), false},
		{"data_volume", dataVolume(10, "io2", ptr(20000.0), ptr(250.0)), false},
		{"data_volume", dataVolume(10, "gp3", nil, ptr(2000.0)), false},
		{"data_volume", dataVolume(0, "gp3", nil, nil), false},
		{"placement_group_name", cty.NullVal(cty.String), true},
		{"placement_group_name", cty.StringVal("redlock-spread"), true},
		{"placement_group_name", cty.StringVal("two words"), false},
		{"ssh_ingress", sshIngress(nil, nil), true},
		{"ssh_ingress", sshIngress([]string{"10.0.0.5/32", "2001:db8::5/128"}, []string{"sg-0123abcd"}), true},
		{"ssh_ingress", sshIngress([]string{"0.0.0.0/0"}, nil), false},
		{"ssh_ingress", sshIngress([]string{"::/0"}, nil), false},
		{"ssh_ingress", sshIngress([]string{"10.0.0.300/32"}, nil), false},
		{"ssh_ingress", sshIngress(nil, []string{"subnet-0a"}), false},
	}
	for _, c := range cases {
		if got := validates(t, m, c.variable, c.value); got != c.want {
			t.Errorf("variable %s = %s: validation got %v, want %v", c.variable, c.value.GoString(), got, c.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// dataVolume is a value of the data_volume variable, its optional
// attributes null when nil.
func dataVolume(size float64, typ string, iops, throughput *float64) cty.Value {
	num := func(p *float64) cty.Value {
		if p == nil {
			return cty.NullVal(cty.Number)
		}
		return cty.NumberFloatVal(*p)
	}
	return cty.ObjectVal(map[string]cty.Value{
		"size": cty.NumberFloatVal(size), "type": cty.StringVal(typ), "iops": num(iops), "throughput": num(throughput),
	})
}

func TestAWSModuleInstances(t *testing.T) {
	m := parseModule(t, moduleDir(t, "aws"))
	inst := m.one(t, "resource", "aws_instance", "this")

	checkRoll(t, m, inst)

	mo := childBlocks(inst, "metadata_options")
	if len(mo) != 1 || literal(t, m, mo[0].Body.Attributes["http_tokens"].Expr).AsString() != "required" {
		t.Error("aws_instance.this must set metadata_options { http_tokens = \"required\" } (IMDSv2 only)")
	}
	rbd := childBlocks(inst, "root_block_device")
	if len(rbd) != 1 || rbd[0].Body.Attributes["encrypted"] == nil || !literal(t, m, rbd[0].Body.Attributes["encrypted"].Expr).True() {
		t.Error("aws_instance.this must set root_block_device { encrypted = true }")
	}
	if a := inst.Body.Attributes["associate_public_ip_address"]; a == nil || !literal(t, m, a.Expr).False() {
		t.Error("aws_instance.this must set associate_public_ip_address = false")
	}
	if a := inst.Body.Attributes["subnet_id"]; a == nil || !hasRef(a.Expr, "local.subnet_ids") && !hasRef(a.Expr, "var.subnet_ids") {
		t.Error("aws_instance.this must place node i in subnet i")
	}
	vol := m.one(t, "resource", "aws_ebs_volume", "data")
	if a := vol.Body.Attributes["encrypted"]; a == nil || !literal(t, m, a.Expr).True() {
		t.Error("aws_ebs_volume.data must be encrypted")
	}
	for attr, want := range map[string]string{"size": "var.data_volume", "type": "var.data_volume", "iops": "var.data_volume", "throughput": "var.data_volume", "availability_zone": "local.zones", "tags": "local.tags"} {
		if a := vol.Body.Attributes[attr]; a == nil || !hasRef(a.Expr, want) {
			t.Errorf("aws_ebs_volume.data: %s must come from %s", attr, want)
		}
	}
	att := m.one(t, "resource", "aws_volume_attachment", "data")
	if a := att.Body.Attributes["stop_instance_before_detaching"]; a == nil || !literal(t, m, a.Expr).True() {
		t.Error("aws_volume_attachment.data must stop the instance before detaching: never from under a running Redis")
	}
	pg := m.one(t, "resource", "aws_placement_group", "this")
	if a := pg.Body.Attributes["name"]; a == nil || !hasRef(a.Expr, "var.placement_group_name") || !hasRef(a.Expr, "terraform_data.placement_group_suffix") {
		t.Error("aws_placement_group.this: name must be var.placement_group_name or unique to the state (terraform_data.placement_group_suffix): names are unique per region")
	}
	call := m.one(t, "module", "redis_node")
	if a := call.Body.Attributes["data_device"]; a == nil || !hasRef(a.Expr, "local.data_devices") {
		t.Error("module redis_node must mount the data volume (data_device = local.data_devices[...])")
	}
	if a := call.Body.Attributes["client_cidrs"]; a == nil || !hasRef(a.Expr, "var.client_cidrs") {
		t.Error("module redis_node must let the unit's IP firewall admit var.client_cidrs")
	}
	for _, typ := range []string{"aws_elasticache_replication_group", "aws_elasticache_cluster", "aws_memorydb_cluster"} {
		if len(m.find("resource", typ)) > 0 {
			t.Errorf("%s: Redlock nodes are independent; no managed replication", typ)
		}
	}
	for path, src := range m.src {
		if regexp.MustCompile(`(?i)replicaof|slaveof`).Match(src) {
			t.Errorf("%s mentions replication", path)
		}
	}
}

// checkRoll checks that whatever replaces an instance reaches it through
// node-generations, whose own tests apply the roll for real: the user data
// (gzipped, from redis-node), the image and the instance type. Nothing may
// hide a change instead (ignore_changes).
func checkRoll(t *testing.T, m *tfModule, inst *hclsyntax.Block) {
	t.Helper()
	gen := m.one(t, "module", "generations")
	if src := literal(t, m, gen.Body.Attributes["source"].Expr).AsString(); src != "../node-generations" {
		t.Errorf("module generations source = %q, want ../node-generations", src)
	}
	for attr, key := range map[string]string{"user_data_base64": "user_data", "ami": "ami", "instance_type": "instance_type"} {
		a, ok := inst.Body.Attributes[attr]
		want := regexp.MustCompile(`^(nonsensitive\()?module\.generations\.definitions\[tostring\(count\.index\)\]\.` + key + `\)?$`)
		if !ok || !want.MatchString(m.text(a.Expr)) {
			t.Errorf("aws_instance.this: %s must be module.generations.definitions[tostring(count.index)].%s (rolled one node at a time)", attr, key)
		}
	}
	if _, ok := inst.Body.Attributes["user_data"]; ok {
		t.Error("aws_instance.this sets user_data: the user data must come gzipped and pinned, through user_data_base64")
	}
	if a := inst.Body.Attributes["user_data_replace_on_change"]; a == nil || !literal(t, m, a.Expr).True() {
		t.Error("aws_instance.this must set user_data_replace_on_change = true: a node handed new user data boots with it")
	}
	for _, lc := range childBlocks(inst, "lifecycle") {
		if _, ok := lc.Body.Attributes["ignore_changes"]; ok {
			t.Error("aws_instance.this ignores changes: a hidden change is never rolled out; let node-generations hold it")
		}
	}
	// The definitions are the current ones: the redis-node user data
	// gzipped, the image, the instance type.
	defs := m.text(gen.Body.Attributes["definitions"].Expr)
	for _, want := range []string{"user_data     = local.user_data[i]", "ami           = local.ami_id", "instance_type = var.instance_type"} {
		if !strings.Contains(defs, want) {
			t.Errorf("module generations: definitions %s, want %q", defs, want)
		}
	}
	ev := newEvaluator(t, m, nil, map[string]cty.Value{"module": cty.ObjectVal(map[string]cty.Value{
		"redis_node": cty.TupleVal([]cty.Value{cty.ObjectVal(map[string]cty.Value{"cloud_init": cty.StringVal("#cloud-config\n")})}),
	})})
	ud := ev.local("user_data").Index(cty.NumberIntVal(0)).AsString()
	zr, err := gzip.NewReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(ud)))
	if err != nil {
		t.Fatalf("local.user_data[0] is not base64 of gzip: %v", err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil || string(plain) != "#cloud-config\n" {
		t.Errorf("local.user_data[0] unpacks to %q (%v), want redis_node's cloud_init", plain, err)
	}
	if a := gen.Body.Attributes["generations"]; a == nil || !hasRef(a.Expr, "var.node_generations") || !hasRef(a.Expr, "aws_ebs_volume.data") {
		t.Error("module generations: generations must come from var.node_generations and each node's data volume (its user data names it)")
	}
}

// conditions returns the condition expressions of the pre- or
// postcondition blocks (kind) in b's lifecycle.
func conditions(b *hclsyntax.Block, kind string) []hclsyntax.Expression {
	var out []hclsyntax.Expression
	for _, lc := range childBlocks(b, "lifecycle") {
		for _, pc := range childBlocks(lc, kind) {
			out = append(out, pc.Body.Attributes["condition"].Expr)
		}
	}
	return out
}

// awsPlan is what the AWS module's checks see at plan time.
type awsPlan struct {
	zones        []string
	vpcs         []string // each subnet's VPC; default vpc-0a, the module's vpc_id
	architecture string   // var.architecture; "" for null
	supported    []string // the instance type's architectures; default x86_64
	hypervisor   string   // default nitro
	cloudInit    string   // every node's rendered user data; default a small one
	tls          bool     // var.tls set (parameter_path /redlock/test/tls)
	profile      string   // var.iam_instance_profile; "" for null
}

// tlsType is the type of modules/aws's var.tls.
var tlsType = cty.Object(map[string]cty.Type{"parameter_path": cty.String, "kms_key_arn": cty.String})

// tlsVar is var.tls: null, or the parameter path with kms_key_arn null.
func tlsVar(on bool) cty.Value {
	if !on {
		return cty.NullVal(tlsType)
	}
	return cty.ObjectVal(map[string]cty.Value{"parameter_path": cty.StringVal("/redlock/test/tls"), "kms_key_arn": cty.NullVal(cty.String)})
}

func nullableString(s string) cty.Value {
	if s == "" {
		return cty.NullVal(cty.String)
	}
	return cty.StringVal(s)
}

// passes evaluates every precondition of aws_instance.this (for node 0) and
// every postcondition of the subnets and the instance type against p.
func (p awsPlan) passes(t *testing.T, m *tfModule) (bool, *evaluator) {
	t.Helper()
	n := len(p.zones)
	subnets := make([]cty.Value, n)
	ids := make([]string, n)
	nodes := make([]cty.Value, n)
	for i, z := range p.zones {
		vpc := "vpc-0a"
		if p.vpcs != nil {
			vpc = p.vpcs[i]
		}
		subnets[i] = cty.ObjectVal(map[string]cty.Value{
			"availability_zone": cty.StringVal(z),
			"cidr_block":        cty.StringVal(fmt.Sprintf("10.0.%d.0/24", i)),
			"vpc_id":            cty.StringVal(vpc),
		})
		ids[i] = fmt.Sprintf("subnet-0%d", i)
		ci := p.cloudInit
		if ci == "" {
			ci = "#cloud-config\n" + strings.Repeat("# a commented node file\n", 500)
		}
		nodes[i] = cty.ObjectVal(map[string]cty.Value{"cloud_init": cty.StringVal(ci)})
	}
	arch := cty.NullVal(cty.String)
	if p.architecture != "" {
		arch = cty.StringVal(p.architecture)
	}
	supported, hypervisor := p.supported, p.hypervisor
	if supported == nil {
		supported = []string{"i386", "x86_64"}
	}
	if hypervisor == "" {
		hypervisor = "nitro"
	}
	itype := cty.ObjectVal(map[string]cty.Value{"supported_architectures": strList(supported...), "hypervisor": cty.StringVal(hypervisor)})
	vars := map[string]cty.Value{
		"node_count":           cty.NumberIntVal(int64(n)),
		"subnet_ids":           strList(ids...),
		"private_ip_hostnum":   cty.NumberIntVal(10),
		"vpc_id":               cty.StringVal("vpc-0a"),
		"architecture":         arch,
		"tls":                  tlsVar(p.tls),
		"iam_instance_profile": nullableString(p.profile),
	}
	extra := map[string]cty.Value{
		"data": cty.ObjectVal(map[string]cty.Value{
			"aws_subnet":            cty.ObjectVal(map[string]cty.Value{"this": cty.TupleVal(subnets)}),
			"aws_ec2_instance_type": cty.ObjectVal(map[string]cty.Value{"this": itype}),
		}),
		"module": cty.ObjectVal(map[string]cty.Value{"redis_node": cty.TupleVal(nodes)}),
		"count":  cty.ObjectVal(map[string]cty.Value{"index": cty.NumberIntVal(0)}),
	}
	check := func(ev *evaluator, what string, conds []hclsyntax.Expression) bool {
		ok := true
		for _, cond := range conds {
			got, diags := ev.eval(cond)
			if diags.HasErrors() {
				t.Fatalf("evaluate %s %s: %v", what, m.text(cond), diags)
			}
			ok = ok && got.True()
		}
		return ok
	}
	ev := newEvaluator(t, m, vars, extra)
	ok := check(ev, "precondition", conditions(m.one(t, "resource", "aws_instance", "this"), "precondition"))
	for _, sub := range subnets {
		withSelf := map[string]cty.Value{"self": sub}
		for k, v := range extra {
			withSelf[k] = v
		}
		ok = check(newEvaluator(t, m, vars, withSelf), "subnet postcondition", conditions(m.one(t, "data", "aws_subnet", "this"), "postcondition")) && ok
	}
	ok = check(newEvaluator(t, m, vars, map[string]cty.Value{"self": itype}), "instance type postcondition",
		conditions(m.one(t, "data", "aws_ec2_instance_type", "this"), "postcondition")) && ok
	return ok, ev
}

// TestAWSModulePlanChecks evaluates the module's plan-time checks: losing any
// one zone must leave a majority of the nodes; the subnets are in vpc_id;
// the image's architecture is one the instance type runs, and the type is a
// Nitro one (the data volume is found by its NVMe name); the user data fits
// EC2's 16 KB.
func TestAWSModulePlanChecks(t *testing.T) {
	m := parseModule(t, moduleDir(t, "aws"))
	five := []string{"a", "b", "c", "d", "e"}
	random := make([]byte, 18000)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		plan awsPlan
		want bool
	}{
		{"five zones", awsPlan{zones: five}, true},
		{"three zones, two nodes at most in one", awsPlan{zones: []string{"a", "b", "c", "a", "b"}}, true},
		{"three nodes in one zone", awsPlan{zones: []string{"a", "a", "a", "b", "c"}}, false},
		{"two zones", awsPlan{zones: []string{"a", "b", "a", "b", "a"}}, false},
		{"one zone", awsPlan{zones: []string{"a", "a", "a", "a", "a"}}, false},
		{"a subnet of another VPC", awsPlan{zones: five, vpcs: []string{"vpc-0a", "vpc-0a", "vpc-0b", "vpc-0a", "vpc-0a"}}, false},
		{"architecture follows a Graviton type", awsPlan{zones: five, supported: []string{"arm64"}}, true},
		{"x86_64 image on a Graviton type", awsPlan{zones: five, architecture: "x86_64", supported: []string{"arm64"}}, false},
		{"arm64 image on an x86 type", awsPlan{zones: five, architecture: "arm64"}, false},
		{"a Xen instance type", awsPlan{zones: five, hypervisor: "xen"}, false},
		{"user data over 16 KB after gzip", awsPlan{zones: five, cloudInit: "#cloud-config\n# " + base64.StdEncoding.EncodeToString(random)}, false},
		{"an instance profile of one's own", awsPlan{zones: five, profile: "ops-agents"}, true},
		{"tls with the module's profile", awsPlan{zones: five, tls: true}, true},
		{"tls with a profile of one's own", awsPlan{zones: five, tls: true, profile: "ops-agents"}, false},
	} {
		ok, ev := c.plan.passes(t, m)
		if ok != c.want {
			t.Errorf("%s: checks pass = %v, want %v", c.name, ok, c.want)
		}
		if c.want && c.name == "five zones" {
			ips := ev.local("private_ips")
			if got := ips.Index(cty.NumberIntVal(1)).AsString(); got != "10.0.1.10" {
				t.Errorf("private_ips[1] = %q, want 10.0.1.10 (host 10 of the node's subnet)", got)
			}
			if got := ev.local("architecture").AsString(); got != "x86_64" {
				t.Errorf("architecture of an x86 type: got %q, want x86_64", got)
			}
		}
	}
}

// TestAWSModuleSecurityGroup checks that the Redis port is the only ingress
// and is open to client_cidrs only.
func TestAWSModuleSecurityGroup(t *testing.T) {
	m := parseModule(t, moduleDir(t, "aws"))
	sg := m.one(t, "resource", "aws_security_group", "this")
	if len(childBlocks(sg, "ingress")) > 0 {
		t.Error("aws_security_group.this has inline ingress blocks; use aws_vpc_security_group_ingress_rule")
	}
	if len(m.find("resource", "aws_security_group_rule")) > 0 {
		t.Error("aws_security_group_rule found; every ingress must be an aws_vpc_security_group_ingress_rule")
	}
	rules := m.find("resource", "aws_vpc_security_group_ingress_rule")
	if len(rules) == 0 {
		t.Fatal("no aws_vpc_security_group_ingress_rule: the clients could not reach Redis")
	}
	for _, r := range rules {
		name := strings.Join(r.Labels, ".")
		if r.Labels[1] == "ssh" {
			checkSSHRule(t, m, r)
			continue
		}
		fe, ok := r.Body.Attributes["for_each"]
		if !ok || !hasRef(fe.Expr, "var.client_cidrs") {
			t.Errorf("%s: for_each must range over var.client_cidrs", name)
		}
		for _, attr := range []string{"cidr_ipv4", "cidr_ipv6"} {
			a, ok := r.Body.Attributes[attr]
			if !ok {
				continue
			}
			rs := refs(a.Expr)
			onlyClient := len(rs) > 0
			for _, ref := range rs {
				onlyClient = onlyClient && ref == "each.value"
			}
			if !onlyClient {
				t.Errorf("%s: %s = %s, want it built from each.value (a client CIDR) only", name, attr, m.text(a.Expr))
			}
		}
		for _, attr := range []string{"referenced_security_group_id", "prefix_list_id"} {
			if _, ok := r.Body.Attributes[attr]; ok {
				t.Errorf("%s: %s admits sources other than client_cidrs", name, attr)
			}
		}
		for _, attr := range []string{"from_port", "to_port"} {
			a, ok := r.Body.Attributes[attr]
			if !ok || !hasRef(a.Expr, "var.redis_port") {
				t.Errorf("%s: %s must be var.redis_port", name, attr)
			}
		}
		if a, ok := r.Body.Attributes["ip_protocol"]; !ok || literal(t, m, a.Expr).AsString() != "tcp" {
			t.Errorf("%s: ip_protocol must be tcp", name)
		}
	}
}

// checkSSHRule checks that the SSH rule opens port 22 only, to the sources
// var.ssh_ingress names, one rule per source.
func checkSSHRule(t *testing.T, m *tfModule, r *hclsyntax.Block) {
	t.Helper()
	fe, ok := r.Body.Attributes["for_each"]
	if !ok {
		t.Fatal("ssh rule: no for_each")
	}
	for _, ref := range refs(fe.Expr) {
		if !strings.HasPrefix(ref, "var.ssh_ingress") && ref != "c" && ref != "g" {
			t.Errorf("ssh rule: for_each reads %s, want var.ssh_ingress only", ref)
		}
	}
	for _, attr := range []string{"cidr_ipv4", "cidr_ipv6", "referenced_security_group_id"} {
		a, ok := r.Body.Attributes[attr]
		if !ok {
			t.Errorf("ssh rule: no %s", attr)
			continue
		}
		for _, ref := range refs(a.Expr) {
			if !strings.HasPrefix(ref, "each.value") {
				t.Errorf("ssh rule: %s = %s, want it from each.value (an ssh_ingress source) only", attr, m.text(a.Expr))
			}
		}
	}
	if _, ok := r.Body.Attributes["prefix_list_id"]; ok {
		t.Error("ssh rule: prefix_list_id admits sources ssh_ingress does not name")
	}
	for _, attr := range []string{"from_port", "to_port"} {
		if a, ok := r.Body.Attributes[attr]; !ok || !literal(t, m, a.Expr).RawEquals(cty.NumberIntVal(22)) {
			t.Errorf("ssh rule: %s must be 22", attr)
		}
	}
	if a, ok := r.Body.Attributes["ip_protocol"]; !ok || literal(t, m, a.Expr).AsString() != "tcp" {
		t.Error("ssh rule: ip_protocol must be tcp")
	}

	// One rule per source, with the address family or the group filled in.
	ev := newEvaluator(t, m, map[string]cty.Value{"ssh_ingress": sshIngress([]string{"10.0.0.5/32", "2001:db8::5/128"}, []string{"sg-0abc"})}, nil)
	got, diags := ev.eval(fe.Expr)
	if diags.HasErrors() {
		t.Fatalf("ssh rule: evaluate for_each: %v", diags)
	}
	want := map[string][3]string{
		"10.0.0.5/32":     {"10.0.0.5/32", "", ""},
		"2001:db8::5/128": {"", "2001:db8::5/128", ""},
		"sg-0abc":         {"", "", "sg-0abc"},
	}
	if n := got.LengthInt(); n != len(want) {
		t.Errorf("ssh rule: %d rules, want %d", n, len(want))
	}
	str := func(v cty.Value) string {
		if v.IsNull() {
			return ""
		}
		return v.AsString()
	}
	for key, w := range want {
		if !got.Type().HasAttribute(key) {
			t.Errorf("ssh rule: no rule for %s", key)
			continue
		}
		v := got.GetAttr(key)
		if g := [3]string{str(v.GetAttr("ipv4")), str(v.GetAttr("ipv6")), str(v.GetAttr("group"))}; g != w {
			t.Errorf("ssh rule for %s: ipv4, ipv6, group = %q, want %q", key, g, w)
		}
	}
}

// sshIngress is a value of variable ssh_ingress.
func sshIngress(cidrs, groups []string) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{"cidrs": strList(cidrs...), "security_group_ids": strList(groups...)})
}

// TestAWSModuleInterface checks the outputs, the provider bounds and that the
// module calls pass only inputs their modules declare (what validate would
// catch) and every required one.
func TestAWSModuleInterface(t *testing.T) {
	m := parseModule(t, moduleDir(t, "aws"))
	for _, name := range []string{"private_addresses", "redlab_nodes", "instance_ids"} {
		o := m.one(t, "output", name)
		if d, ok := o.Body.Attributes["description"]; !ok || literal(t, m, d.Expr).AsString() == "" {
			t.Errorf("output %q has no description", name)
		}
	}
	instances := cty.TupleVal([]cty.Value{
		cty.ObjectVal(map[string]cty.Value{"private_ip": cty.StringVal("10.0.1.10")}),
		cty.ObjectVal(map[string]cty.Value{"private_ip": cty.StringVal("10.0.2.10")}),
		cty.ObjectVal(map[string]cty.Value{"private_ip": cty.StringVal("10.0.3.10")}),
	})
	for tls, want := range map[bool]string{
		false: "10.0.1.10:6379,10.0.2.10:6379,10.0.3.10:6379",
		true:  "rediss://10.0.1.10:6379,rediss://10.0.2.10:6379,rediss://10.0.3.10:6379",
	} {
		ev := newEvaluator(t, m, map[string]cty.Value{"redis_port": cty.NumberIntVal(6379), "tls": tlsVar(tls)},
			map[string]cty.Value{"aws_instance": cty.ObjectVal(map[string]cty.Value{"this": instances})})
		got, diags := ev.eval(m.one(t, "output", "redlab_nodes").Body.Attributes["value"].Expr)
		if diags.HasErrors() {
			t.Fatalf("evaluate output redlab_nodes: %v", diags)
		}
		if got.AsString() != want {
			t.Errorf("tls %v: redlab_nodes = %q, want %q", tls, got.AsString(), want)
		}
	}

	for _, dir := range awsRoots(t) {
		for name, v := range requiredProviders(t, parseModule(t, dir)) {
			ver := v.GetAttr("version").AsString()
			if !regexp.MustCompile(`^>=\s*[0-9][0-9.]*$`).MatchString(ver) {
				t.Errorf("%s: provider %s version %q, want a lower bound (>=) only", dir, name, ver)
			}
		}
	}

	checkModuleCall(t, m, "redis_node", moduleDir(t, "redis-node"))
	checkModuleCall(t, m, "generations", moduleDir(t, "node-generations"))
	env := parseModule(t, filepath.Join(moduleDir(t, "aws"), "..", "..", "envs", "aws"))
	checkModuleCall(t, env, "redlock", moduleDir(t, "aws"))
	if len(env.find("provider", "aws")) != 1 {
		t.Error("envs/aws must configure the aws provider")
	}
	if len(env.find("output", "redlab_nodes")) != 1 {
		t.Error("envs/aws must output redlab_nodes")
	}
}

// awsRoots are modules/aws and envs/aws, the modules that use the aws
// provider.
func awsRoots(t *testing.T) []string {
	t.Helper()
	aws := moduleDir(t, "aws")
	return []string{aws, filepath.Join(aws, "..", "..", "envs", "aws")}
}

// requiredProviders returns the entries of m's required_providers blocks by
// local name ({source = ..., version = ...}).
func requiredProviders(t *testing.T, m *tfModule) map[string]cty.Value {
	t.Helper()
	out := map[string]cty.Value{}
	for _, tf := range m.find("terraform") {
		for _, rp := range childBlocks(tf, "required_providers") {
			for name, a := range rp.Body.Attributes {
				out[name] = literal(t, m, a.Expr)
			}
		}
	}
	return out
}

// checkModuleCall compares the arguments of module <call> in m with the
// variables declared in dir.
func checkModuleCall(t *testing.T, m *tfModule, call, dir string) {
	t.Helper()
	callee := parseModule(t, dir)
	declared := map[string]bool{}
	var required []string
	for _, v := range callee.find("variable") {
		declared[v.Labels[0]] = true
		if _, ok := v.Body.Attributes["default"]; !ok {
			required = append(required, v.Labels[0])
		}
	}
	b := m.one(t, "module", call)
	meta := map[string]bool{"source": true, "count": true, "for_each": true, "providers": true, "depends_on": true, "version": true}
	var unknown []string
	for name := range b.Body.Attributes {
		if !meta[name] && !declared[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		t.Errorf("module %s passes %v, which %s does not declare", call, unknown, dir)
	}
	for _, name := range required {
		if _, ok := b.Body.Attributes[name]; !ok {
			t.Errorf("module %s does not pass the required variable %s of %s", call, name, dir)
		}
	}
}

// TestAWSTfvarsExample checks that envs/aws's terraform.tfvars.example sets
// only variables envs/aws declares, and shows the way in for drills: a key
// pair and an ssh_ingress that modules/aws's validation accepts.
func TestAWSTfvarsExample(t *testing.T) {
	envDir := filepath.Join(moduleDir(t, "aws"), "..", "..", "envs", "aws")
	env := parseModule(t, envDir)
	path := filepath.Join(envDir, "terraform.tfvars.example")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	file, diags := hclparse.NewParser().ParseHCL(src, path)
	if diags.HasErrors() {
		t.Fatalf("parse %s: %v", path, diags)
	}
	attrs := file.Body.(*hclsyntax.Body).Attributes
	for name := range attrs {
		if len(env.find("variable", name)) == 0 {
			t.Errorf("%s sets %s, which envs/aws does not declare", path, name)
		}
	}
	for _, name := range []string{"key_name", "ssh_ingress"} {
		if _, ok := attrs[name]; !ok {
			t.Errorf("%s does not show %s: the control host needs a key and a way in for drills over SSH", path, name)
		}
	}
	a, ok := attrs["ssh_ingress"]
	if !ok {
		return
	}
	v := literal(t, env, a.Expr)
	full := map[string]cty.Value{"cidrs": strList(), "security_group_ids": strList()}
	for k := range full {
		if v.Type().HasAttribute(k) {
			if full[k], err = convert.Convert(v.GetAttr(k), cty.List(cty.String)); err != nil {
				t.Fatalf("ssh_ingress.%s: %v", k, err)
			}
		}
	}
	if full["cidrs"].LengthInt()+full["security_group_ids"].LengthInt() == 0 {
		t.Errorf("%s: ssh_ingress names no source", path)
	}
	if !validates(t, parseModule(t, moduleDir(t, "aws")), "ssh_ingress", cty.ObjectVal(full)) {
		t.Errorf("%s: ssh_ingress = %s fails modules/aws's validation", path, env.text(a.Expr))
	}
}

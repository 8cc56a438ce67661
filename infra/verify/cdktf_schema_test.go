package verify

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/zclconf/go-cty/cty"
)

// The hashicorp/aws provider's schema, read from @cdktf/provider-aws, which
// cdktf generated from that schema: an independent source for checking the
// AWS module without downloading the provider. scripts/setup.sh installs the
// package (npm ci in testdata/provider-aws, pinned by its package-lock.json);
// the tests read two files of it per resource type, lib/<folder>/index.js and
// index.d.ts, and its package.json, with regular expressions: no node.
//
// What each fact is read from, and why there (the generator is
// hashicorp/terraform-cdk's provider-generator, resource-parser.ts and
// attribute-type-model.ts):
//
//   - Terraform names: the keys of the objects that synthesizeHclAttributes
//     (the resource, data source or provider) and each <struct>ToHclTerraform
//     function (a nested block) return. That is the code that writes cdktf's
//     configuration, so a wrong name there would break every cdktf user. The
//     .d.ts names are camelCase and sometimes renamed (aws_instance's
//     get_password_data is fetchPasswordData).
//   - Types: the same entries' type ("simple", "list", "set", "map",
//     "struct") and storageClassType ("string", "number", "boolean",
//     "stringList", "stringMap", ..., or a struct's name). The .d.ts merges
//     list and set and spells bool as boolean | cdktf.IResolvable.
//   - Nested block or attribute: the .d.ts doc comment "<name> block", which
//     the generator writes for every block type and for nothing else (an
//     attribute's comment is the provider's description). The entries'
//     isBlock is not it: it means "has a struct type", true for object-typed
//     and nested attributes too. For list and set blocks the JS agrees
//     independently: listMapperHcl(fn, true), whose true is "is a block";
//     loadSchema fails if the two disagree.
//   - Repeated or at most one: a list or set block of max_items 1 is written
//     with its struct function alone, without listMapperHcl. A "struct" block
//     is nesting mode single (timeouts), also at most one. The provider
//     block's own blocks are always written as lists (cdktf gives providers no
//     single-item classes), so there a max_items 1 block is not told apart.
//   - Required: the .d.ts property without "?". For an attribute that is the
//     schema's required; for a list or set block it is min_items >= 1, which
//     Terraform enforces. For a single block cdktf marks it required when
//     every attribute in it is, which Terraform does not enforce, so that mark
//     is ignored. Computed-only attributes are not in either file: setting one
//     is reported as unknown, as Terraform would.
//   - What a reference may read (data.aws_ami.debian[0].id): the names the
//     class's getters pass to getStringAttribute('id') and its kin, or to
//     the classes of nested blocks and computed lists (new ...(this, "name")).

// providerAWSDir is the npm fixture that holds the package.
const providerAWSDir = "testdata/provider-aws"

// schemaAttr is one argument: its Terraform type and whether it is required.
type schemaAttr struct {
	typ      cty.Type // cty.DynamicPseudoType when cdktf does not spell it out (objects, "any")
	typeName string   // cdktf's storageClassType, for messages
	required bool
}

// nesting is how often a nested block may appear.
type nesting int

const (
	nestingRepeated nesting = iota // list or set, no maximum read
	nestingOne                     // list or set of max_items 1, or single
	nestingMap                     // map: one block per label
)

// schemaNested is a nested block type.
type schemaNested struct {
	nesting  nesting
	required bool // min_items >= 1 (list and set only)
	body     *schemaBody
}

// schemaBody is what one level of a resource, data source or provider block
// accepts.
type schemaBody struct {
	attrs  map[string]*schemaAttr
	blocks map[string]*schemaNested
	// readable is what a reference may read at the top level: the arguments,
	// the blocks and the computed attributes (nil below the top).
	readable map[string]bool
}

// providerPackage is the installed @cdktf/provider-aws.
type providerPackage struct {
	dir      string // .../node_modules/@cdktf/provider-aws
	version  string // of the npm package
	provider string // "registry.terraform.io/hashicorp/aws"
	schema   string // the provider's version its schema came from, "6.25.0"
	cache    map[string]*schemaBody
}

// openProviderAWS opens the package setup installed in providerAWSDir; it is
// Missing when it is not there or not the version package.json pins.
func openProviderAWS(t *testing.T) *providerPackage {
	t.Helper()
	fixture, err := filepath.Abs(providerAWSDir)
	if err != nil {
		t.Fatal(err)
	}
	var pin struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	readJSON(t, filepath.Join(fixture, "package.json"), &pin)
	want := pin.Dependencies["@cdktf/provider-aws"]
	dir := filepath.Join(fixture, "node_modules", "@cdktf", "provider-aws")
	install := fmt.Sprintf("run scripts/setup.sh test, or `npm ci --prefix %s` (npm)", filepath.Join("infra", "verify", providerAWSDir))
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		testenv.Missing(t, fmt.Sprintf("@cdktf/provider-aws (the aws provider's schema) is not installed in infra/verify/%s: %s", providerAWSDir, install))
	}
	var pkg struct {
		Version string `json:"version"`
		CDKTF   struct {
			Provider struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"provider"`
		} `json:"cdktf"`
	}
	readJSON(t, filepath.Join(dir, "package.json"), &pkg)
	if pkg.Version != want {
		testenv.Missing(t, fmt.Sprintf("@cdktf/provider-aws %s is installed, but package.json pins %s: %s", pkg.Version, want, install))
	}
	if pkg.CDKTF.Provider.Name != "registry.terraform.io/hashicorp/aws" || pkg.CDKTF.Provider.Version == "" {
		t.Fatalf("@cdktf/provider-aws %s: package.json names provider %q version %q, want registry.terraform.io/hashicorp/aws and a version",
			pkg.Version, pkg.CDKTF.Provider.Name, pkg.CDKTF.Provider.Version)
	}
	return &providerPackage{dir: dir, version: pkg.Version, provider: pkg.CDKTF.Provider.Name,
		schema: pkg.CDKTF.Provider.Version, cache: map[string]*schemaBody{}}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// String names the schema in messages.
func (p *providerPackage) String() string {
	return fmt.Sprintf("hashicorp/aws %s (@cdktf/provider-aws %s)", p.schema, p.version)
}

// folder is where cdktf puts a type (getFileName in resource-parser.ts):
// "provider", "data-aws-subnet" for data "aws_subnet", "instance" for
// resource "aws_instance".
func folder(kind, typ string) string {
	switch kind {
	case "provider":
		return "provider"
	case "data":
		return strings.ReplaceAll("data_"+typ, "_", "-")
	}
	return strings.ReplaceAll(strings.TrimPrefix(typ, "aws_"), "_", "-")
}

// body returns the schema of a resource, data source (kind "data") or the
// provider (kind "provider", typ "aws"); ok is false when the package has no
// such type.
func (p *providerPackage) body(t *testing.T, kind, typ string) (body *schemaBody, ok bool) {
	t.Helper()
	key := kind + " " + typ
	if b, ok := p.cache[key]; ok {
		return b, b != nil
	}
	dir := filepath.Join(p.dir, "lib", folder(kind, typ))
	js, err := os.ReadFile(filepath.Join(dir, "index.js"))
	if os.IsNotExist(err) {
		p.cache[key] = nil
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	dts, err := os.ReadFile(filepath.Join(dir, "index.d.ts"))
	if err != nil {
		t.Fatal(err)
	}
	// A folder named like the type but holding another one would be read
	// as its schema: the generated class names its type.
	if m := tfTypeRE.FindSubmatch(js); m == nil || string(m[1]) != typ {
		p.cache[key] = nil
		return nil, false
	}
	b, err := parseCDKTF(string(js), string(dts))
	if err != nil {
		t.Fatalf("%s: reading %s %s from %s: %v", p, kind, typ, dir, err)
	}
	p.cache[key] = b
	return b, true
}

var (
	tfTypeRE = regexp.MustCompile(`\.tfResourceType = "([a-z0-9_]+)";`)

	// The start of the code that writes one level: the resource's own
	// attributes, or a nested block's.
	jsLevelRE = regexp.MustCompile(`(?m)^ *(?:synthesizeHclAttributes\(\) \{|function (\w+)ToHclTerraform\(struct\) \{)$`)
	jsEntryRE = regexp.MustCompile(`(?m)^ +"?(\w+)"?: \{\n +value: (.*),\n +isBlock: (?:true|false),\n +type: "(\w+)",\n +storageClassType: "(\w+)",\n +\},$`)
	// A struct function named in a value: the nested block's own level.
	jsStructRE    = regexp.MustCompile(`(?:^|[^.\w])(\w+)ToHclTerraform\b`)
	jsListMapRE   = regexp.MustCompile(`cdktf\.listMapperHcl\((?:cdktf\.)?\w+, (true|false)\)`)
	dtsConfigRE   = regexp.MustCompile(`constructor\(scope: Construct, id: string, config\??: (\w+)\);`)
	dtsStructRE   = regexp.MustCompile(`export declare function (\w+)ToHclTerraform\(struct\?: ([^)]*)\): any;`)
	dtsIfaceRE    = regexp.MustCompile(`(?ms)^export interface (\w+)(?: extends [\w.]+)? \{\n(.*?)\n\}$`)
	dtsPropRE     = regexp.MustCompile(`(?s)/\*\*((?:[^*]|\*[^/])*)\*/\s*readonly (\w+)(\??):`)
	dtsAnchorRE   = regexp.MustCompile(`\{@link https://\S+#(\w+) \w+#\w+\}`)
	dtsBlockRE    = regexp.MustCompile(`(?m)^\s*\* (\w+) block$`)
	dtsReadonlyRE = regexp.MustCompile(`(?m)^    readonly `)
	jsClassRE     = regexp.MustCompile(`(?m)^class \w+ extends cdktf\.Terraform(?:Resource|DataSource|Provider) \{$`)
	jsGetterRE    = regexp.MustCompile(`(?:\.get\w*Attribute|\.interpolationForAttribute)\('(\w+)'\)|new \w+\(this, "(\w+)"`)
)

// jsEntry is one entry of a level's attrs object.
type jsEntry struct {
	value, typ, storage string
}

// dtsProp is one property of a .d.ts interface, by its Terraform name.
type dtsProp struct {
	required, block bool
}

// parseCDKTF reads one generated resource (or data source or provider) from
// its index.js and index.d.ts.
func parseCDKTF(js, dts string) (*schemaBody, error) {
	levels := map[string]map[string]jsEntry{} // "" is the resource itself
	locs := jsLevelRE.FindAllStringSubmatchIndex(js, -1)
	for i, loc := range locs {
		end := len(js)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		text := js[loc[1]:end]
		if cut := strings.Index(text, "// remove undefined attributes"); cut >= 0 {
			text = text[:cut]
		}
		name := ""
		if loc[2] >= 0 {
			name = js[loc[2]:loc[3]]
		}
		entries := map[string]jsEntry{}
		for _, m := range jsEntryRE.FindAllStringSubmatch(text, -1) {
			entries[m[1]] = jsEntry{value: m[2], typ: m[3], storage: m[4]}
		}
		if n := strings.Count(text, "isBlock: "); n != len(entries) {
			return nil, fmt.Errorf("level %q: read %d of its %d entries", name, len(entries), n)
		}
		levels[name] = entries
	}
	if _, ok := levels[""]; !ok {
		return nil, fmt.Errorf("no synthesizeHclAttributes")
	}

	ifaces := map[string]map[string]dtsProp{}
	for _, m := range dtsIfaceRE.FindAllStringSubmatch(dts, -1) {
		props := map[string]dtsProp{}
		for _, p := range dtsPropRE.FindAllStringSubmatch(m[2], -1) {
			a := dtsAnchorRE.FindStringSubmatch(p[1])
			if a == nil {
				return nil, fmt.Errorf("interface %s: property %s has no Terraform name in its doc comment", m[1], p[2])
			}
			b := dtsBlockRE.FindStringSubmatch(p[1])
			props[a[1]] = dtsProp{required: p[3] == "", block: b != nil && b[1] == a[1]}
		}
		if n := len(dtsReadonlyRE.FindAllString(m[2], -1)); n != len(props) {
			return nil, fmt.Errorf("interface %s: read %d of its %d properties", m[1], len(props), n)
		}
		ifaces[m[1]] = props
	}
	structIface := map[string]string{} // struct function name -> interface
	for _, m := range dtsStructRE.FindAllStringSubmatch(dts, -1) {
		for _, alt := range strings.Split(m[2], " | ") {
			if !strings.HasSuffix(alt, "OutputReference") && !strings.HasPrefix(alt, "cdktf.") {
				structIface[m[1]] = alt
			}
		}
	}
	cfg := dtsConfigRE.FindStringSubmatch(dts)
	if cfg == nil {
		return nil, fmt.Errorf("no constructor in index.d.ts")
	}

	var build func(level, iface string, seen []string) (*schemaBody, error)
	build = func(level, iface string, seen []string) (*schemaBody, error) {
		for _, s := range seen {
			if s == level { // cdktf's recursive structs; no AWS type we use has one
				return &schemaBody{attrs: map[string]*schemaAttr{}, blocks: map[string]*schemaNested{}}, nil
			}
		}
		entries, ok := levels[level]
		if !ok {
			return nil, fmt.Errorf("no %sToHclTerraform", level)
		}
		props, ok := ifaces[iface]
		if !ok {
			return nil, fmt.Errorf("no interface %s in index.d.ts", iface)
		}
		if err := sameNames(entries, props); err != nil {
			return nil, fmt.Errorf("%s: %w", iface, err)
		}
		b := &schemaBody{attrs: map[string]*schemaAttr{}, blocks: map[string]*schemaNested{}}
		for name, e := range entries {
			p := props[name]
			if !p.block {
				if lm := jsListMapRE.FindStringSubmatch(e.value); lm != nil && lm[1] == "true" {
					return nil, fmt.Errorf("%s.%s: the JS writes it as a block, the .d.ts does not call it one", iface, name)
				}
				b.attrs[name] = &schemaAttr{typ: ctyType(e.typ, e.storage), typeName: e.storage, required: p.required}
				continue
			}
			sm := jsStructRE.FindStringSubmatch(e.value)
			if sm == nil {
				return nil, fmt.Errorf("%s.%s: a block without a struct function in %q", iface, name, e.value)
			}
			n := &schemaNested{}
			switch lm := jsListMapRE.FindStringSubmatch(e.value); {
			case e.typ == "map":
				n.nesting = nestingMap
			case e.typ == "struct":
				n.nesting = nestingOne
			case lm == nil:
				n.nesting, n.required = nestingOne, p.required
			case lm[1] == "true":
				n.nesting, n.required = nestingRepeated, p.required
			default:
				return nil, fmt.Errorf("%s.%s: the .d.ts calls it a block, the JS writes it as an attribute (%s)", iface, name, e.value)
			}
			var err error
			if n.body, err = build(sm[1], structIface[sm[1]], append(seen, level)); err != nil {
				return nil, err
			}
			b.blocks[name] = n
		}
		return b, nil
	}
	top, err := build("", cfg[1], nil)
	if err != nil {
		return nil, err
	}
	class := jsClassRE.FindStringIndex(js)
	if class == nil {
		return nil, fmt.Errorf("no class extending cdktf.TerraformResource, DataSource or Provider")
	}
	top.readable = map[string]bool{}
	for _, m := range jsGetterRE.FindAllStringSubmatch(js[class[1]:], -1) {
		top.readable[m[1]+m[2]] = true
	}
	for n := range top.attrs {
		top.readable[n] = true
	}
	for n := range top.blocks {
		top.readable[n] = true
	}
	return top, nil
}

// sameNames checks that the JS and the .d.ts list the same Terraform names,
// so that a property the expressions missed cannot pass for an absent one.
func sameNames(entries map[string]jsEntry, props map[string]dtsProp) error {
	var only []string
	for n := range entries {
		if _, ok := props[n]; !ok {
			only = append(only, "JS "+n)
		}
	}
	for n := range props {
		if _, ok := entries[n]; !ok {
			only = append(only, ".d.ts "+n)
		}
	}
	sort.Strings(only)
	if len(only) > 0 {
		return fmt.Errorf("names in one file only: %v", only)
	}
	return nil
}

// ctyType is the Terraform type of an attribute as cdktf stores it: typ is
// the outer collection ("simple", "list", "set", "map"), storage the element
// chain ("stringListMap" is a map of lists of strings; an inner "List" may
// be a set, which a literal converts to alike). Objects and "any" are not
// spelled out: DynamicPseudoType, which every value fits.
func ctyType(typ, storage string) cty.Type {
	var wrap []func(cty.Type) cty.Type
	for {
		if s, ok := strings.CutSuffix(storage, "List"); ok {
			storage, wrap = s, append(wrap, cty.List)
		} else if s, ok := strings.CutSuffix(storage, "Map"); ok {
			storage, wrap = s, append(wrap, cty.Map)
		} else {
			break
		}
	}
	var ty cty.Type
	switch storage {
	case "string":
		ty = cty.String
	case "number":
		ty = cty.Number
	case "boolean":
		ty = cty.Bool
	default:
		return cty.DynamicPseudoType
	}
	for i := len(wrap) - 1; i >= 0; i-- {
		if i == 0 && typ == "set" {
			ty = cty.Set(ty)
		} else {
			ty = wrap[i](ty)
		}
	}
	return ty
}

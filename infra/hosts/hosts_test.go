package hosts_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/redlocklab/redlocklab/infra/hosts"
)

const good = `{
  "drill_environment": true,
  "hosts": [
    {"name": "node-1", "address": "10.0.1.10", "redis": "10.0.1.10:6379", "user": "admin", "key": "/k", "type": "vm", "instance_id": "i-1"},
    {"address": "127.0.0.1", "port": 2222, "redis": "127.0.0.1:6380", "user": "root", "type": "machine"}
  ]
}
`

func TestHostsParse(t *testing.T) {
	inv, err := hosts.Parse("h.json", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := &hosts.Inventory{DrillEnvironment: true, Hosts: []hosts.Host{
		{Name: "node-1", Address: "10.0.1.10", Redis: "10.0.1.10:6379", User: "admin", Key: "/k", Type: hosts.VM, InstanceID: "i-1"},
		{Address: "127.0.0.1", Port: 2222, Redis: "127.0.0.1:6380", User: "root", Type: hosts.Machine},
	}}
	if !reflect.DeepEqual(inv, want) {
		t.Errorf("got %+v, want %+v", inv, want)
	}
	if got := inv.Hosts[0].SSHAddress(); got != "10.0.1.10:22" {
		t.Errorf("SSHAddress = %q, want 10.0.1.10:22", got)
	}
	if got := inv.Hosts[1].Label(2); got != "host-2" {
		t.Errorf("Label = %q, want host-2", got)
	}
	// What Write stores, Parse reads back the same.
	path := filepath.Join(t.TempDir(), "hosts.json")
	if err := hosts.Write(path, inv); err != nil {
		t.Fatal(err)
	}
	back, err := hosts.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, inv) {
		t.Errorf("round trip: got %+v, want %+v", back, inv)
	}
	// YAML means the same.
	y, err := hosts.Parse("h.yaml", []byte("hosts:\n  - name: node-1\n    address: 10.0.1.10\n    redis: 10.0.1.10:6379\n    user: admin\n    key: /k\n    type: vm\n    instance_id: i-1\n  - address: 127.0.0.1\n    port: 2222\n    redis: 127.0.0.1:6380\n    user: root\n    type: machine\ndrill_environment: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(y, want) {
		t.Errorf("YAML: got %+v, want %+v", y, want)
	}
}

func TestHostsOwnNetns(t *testing.T) {
	inv, err := hosts.Parse("h.json", []byte(`{"hosts": [{"address": "10.1.2.2", "redis": "10.1.2.2:7201", "user": "root", "type": "machine", "own_netns": true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !inv.Hosts[0].OwnNetns {
		t.Errorf("own_netns: got false, want true")
	}
	b, err := hosts.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := hosts.Parse("again.json", b); err != nil || !again.Hosts[0].OwnNetns {
		t.Errorf("written and read again: own_netns lost (%v)\n%s", err, b)
	}
}

func TestHostsParseErrors(t *testing.T) {
	host := `{"address": "a", "redis": "a:6379", "user": "u", "type": "vm"}`
	for _, tc := range []struct {
		name, in, want string
	}{
		{"unknown field", `{"hosts": [` + host + `], "drill": true}`, `h.json:1: drill: unknown field`},
		{"unknown host field", "{\"hosts\": [\n" + `{"address": "a", "redis": "a:6379", "user": "u", "type": "vm", "pasword": "x"}` + "]}", `h.json:2: hosts[0].pasword: unknown field`},
		{"duplicate", "{\"hosts\": [\n{\"address\": \"a\",\n \"address\": \"b\", \"redis\": \"a:6379\", \"user\": \"u\", \"type\": \"vm\"}]}", `h.json:3: hosts[0].address: given twice`},
		{"missing user", "{\"hosts\": [\n" + `{"address": "a", "redis": "a:6379", "type": "vm"}` + "]}", `h.json:2: hosts[0].user: missing (required)`},
		{"missing hosts", `{"drill_environment": true}`, `hosts: missing (required)`},
		{"empty hosts", `{"hosts": []}`, `hosts: want a list of at least one host`},
		{"bad type", `{"hosts": [{"address": "a", "redis": "a:6379", "user": "u", "type": "container"}]}`, `hosts[0].type: want vm or machine, got "container"`},
		{"bad redis", `{"hosts": [{"address": "a", "redis": "a", "user": "u", "type": "vm"}]}`, `hosts[0].redis: want host:port`},
		{"bad port", `{"hosts": [{"address": "a", "port": 70000, "redis": "a:1", "user": "u", "type": "vm"}]}`, `hosts[0].port: want a port 1-65535`},
		{"string port", `{"hosts": [{"address": "a", "port": "22", "redis": "a:1", "user": "u", "type": "vm"}]}`, `hosts[0].port: want a port 1-65535`},
		{"bad drill flag", `{"drill_environment": "yes", "hosts": [` + host + `]}`, `drill_environment: want true or false`},
		{"same host twice", `{"hosts": [` + host + `,` + "\n" + `{"address": "a", "redis": "b:6379", "user": "u", "type": "vm"}]}`, `h.json:2: hosts[1].address: "a:22" is also hosts[0]`},
		{"same redis twice", `{"hosts": [` + host + `,` + `{"address": "b", "redis": "a:6379", "user": "u", "type": "vm"}]}`, `hosts[1].redis: "a:6379" is also hosts[0]`},
		{"syntax", "{\"hosts\": [\n{\"address\": }", `h.json:1: syntax: sequence end`},
		{"not a mapping", `[1, 2]`, `want a mapping`},
		{"empty value", `{"hosts": [{"address": "", "redis": "a:1", "user": "u", "type": "vm"}]}`, `hosts[0].address: empty`},
		{"own netns on a vm", `{"hosts": [{"address": "a", "redis": "a:1", "user": "u", "type": "vm", "own_netns": true}]}`, `hosts[0].own_netns: only a lab machine`},
		{"own netns not a bool", `{"hosts": [{"address": "a", "redis": "a:1", "user": "u", "type": "machine", "own_netns": "yes"}]}`, `hosts[0].own_netns: want true or false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := hosts.Parse("h.json", []byte(tc.in))
			var fe *hosts.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want a *hosts.FileError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestHostsDrillEnvironmentRefusal(t *testing.T) {
	inv := &hosts.Inventory{Hosts: []hosts.Host{{Address: "a", Redis: "a:1", User: "u", Type: hosts.VM}}}
	if err := inv.CheckDrillEnvironment(); !errors.Is(err, hosts.ErrNotDrillEnvironment) || !strings.Contains(err.Error(), `"drill_environment": true`) {
		t.Errorf("got %v, want ErrNotDrillEnvironment naming the field", err)
	}
	inv.DrillEnvironment = true
	if err := inv.CheckDrillEnvironment(); err != nil {
		t.Errorf("drill environment: got %v, want nil", err)
	}
	if _, err := inv.Pick(2); !errors.Is(err, hosts.ErrInvalid) {
		t.Errorf("Pick(2) of one host: got %v, want ErrInvalid", err)
	}
}

// envOutputs returns the names of the outputs infra/envs/aws declares.
func envOutputs(t *testing.T) []string {
	t.Helper()
	f, diags := hclparse.NewParser().ParseHCLFile(filepath.Join("..", "envs", "aws", "outputs.tf"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	content, _, diags := f.Body.PartialContent(outputsSchema)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	var names []string
	for _, b := range content.Blocks {
		names = append(names, b.Labels[0])
	}
	sort.Strings(names)
	return names
}

func fixture(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "tofu-output-aws.json"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := hosts.ParseOutputJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The recorded `tofu output -json` is what infra/envs/aws outputs today: an
// output added to or removed from the env shows here first.
func TestHostsTofuFixtureMatchesEnv(t *testing.T) {
	var keys []string
	for k := range fixture(t) {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if env := envOutputs(t); !slices.Equal(keys, env) {
		t.Errorf("fixture outputs %v, infra/envs/aws declares %v", keys, env)
	}
	for _, k := range hosts.TofuOutputs {
		if !slices.Contains(envOutputs(t), k) {
			t.Errorf("FromOutputs reads %q, which infra/envs/aws does not output", k)
		}
	}
}

func TestHostsFromTofu(t *testing.T) {
	out := fixture(t)
	inv, err := hosts.FromOutputs(out, hosts.FromTofuOptions{Key: "~/.ssh/redlock.pem", DrillEnvironment: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Hosts) != 5 || !inv.DrillEnvironment {
		t.Fatalf("got %d hosts, drill %v; want 5, true", len(inv.Hosts), inv.DrillEnvironment)
	}
	want := hosts.Host{Name: "node-3", Address: "10.0.3.10", Redis: "10.0.3.10:6379", User: "admin", Key: "~/.ssh/redlock.pem", Type: hosts.VM, InstanceID: "i-0a1b2c3d4e5f60003"}
	if inv.Hosts[2] != want {
		t.Errorf("host 3: got %+v, want %+v", inv.Hosts[2], want)
	}
	// What from-tofu writes is a valid hosts file.
	b, err := hosts.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hosts.Parse("out.json", b); err != nil {
		t.Errorf("written inventory does not parse: %v", err)
	}

	if _, err := hosts.FromOutputs(out, hosts.FromTofuOptions{Public: true}); err == nil || !strings.Contains(err.Error(), "no public address") {
		t.Errorf("--public without public addresses: got %v, want an error saying so", err)
	}
	delete(out, "ssh_user")
	if _, err := hosts.FromOutputs(out, hosts.FromTofuOptions{}); err == nil || !strings.Contains(err.Error(), "lack ssh_user") {
		t.Errorf("without ssh_user: got %v, want an error naming it", err)
	}
}

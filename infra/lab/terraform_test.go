package lab

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFindTerraform(t *testing.T) {
	dir := t.TempDir()
	exe := func(p string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	custom := exe(filepath.Join(dir, "custom", "tofu"))
	repo := filepath.Join(dir, "repo")
	bundled := exe(filepath.Join(repo, "bin", "tofu"))
	onPath := func(names ...string) func(string) (string, error) {
		return func(n string) (string, error) {
			for _, m := range names {
				if m == n {
					return "/usr/bin/" + n, nil
				}
			}
			return "", exec.ErrNotFound
		}
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "REDLAB_TF" {
				return v
			}
			return ""
		}
	}
	tests := []struct {
		name    string
		env     string
		path    []string
		roots   []string
		want    string
		wantErr bool
	}{
		{name: "REDLAB_TF wins", env: custom, path: []string{"tofu", "terraform"}, want: custom},
		{name: "REDLAB_TF missing is an error", env: filepath.Join(dir, "nope"), path: []string{"tofu"}, wantErr: true},
		{name: "tofu before terraform", path: []string{"terraform", "tofu"}, want: "/usr/bin/tofu"},
		{name: "terraform", path: []string{"terraform"}, want: "/usr/bin/terraform"},
		{name: "bin/tofu under a root", roots: []string{filepath.Join(dir, "elsewhere"), repo}, want: bundled},
		{name: "nothing", roots: []string{filepath.Join(dir, "elsewhere")}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findTerraform(env(tt.env), onPath(tt.path...), tt.roots)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := findTerraform(env(""), onPath(), nil); !errors.Is(err, ErrNoTerraform) {
		t.Errorf("got %v, want ErrNoTerraform", err)
	}
}

// fakeTerraform writes a stand-in for tofu/terraform that appends its argv
// (one line, arguments separated by '|') and, except for `version`, its
// TF_IN_AUTOMATION, CHECKPOINT_DISABLE and TF_CLI_CONFIG_FILE to log, answers `version -json` and `output -json`,
// and fails `apply` when FAKE_FAIL is set in its environment.
func fakeTerraform(t *testing.T) (bin, log string) {
	t.Helper()
	dir := t.TempDir()
	log = filepath.Join(dir, "argv.log")
	bin = filepath.Join(dir, "terraform")
	script := `#!/bin/bash
log='` + log + `'
( IFS='|'; echo "$*" ) >>"$log"
[ "$1" = version ] || echo "env TF_IN_AUTOMATION=$TF_IN_AUTOMATION CHECKPOINT_DISABLE=$CHECKPOINT_DISABLE TF_CLI_CONFIG_FILE=${TF_CLI_CONFIG_FILE:-}" >>"$log"
case "$1" in
version) echo '{"terraform_version":"1.11.4","platform":"linux_amd64","provider_selections":{}}' ;;
output) echo '{"addrs":{"sensitive":false,"type":["list","string"],"value":["127.0.0.1:7101"]}}' ;;
apply)
  if [ -n "${FAKE_FAIL:-}" ]; then
    echo "Error: Invalid value for variable" >&2
    echo "  node_count must be an integer from 1 to 99." >&2
    exit 1
  fi
  if [ -n "${FAKE_WAIT:-}" ]; then
    trap 'echo INT >>"$log"; exit 130' INT
    : >"$FAKE_WAIT"
    # The wait builtin returns at once on a trapped signal; a SIGINT that
    # arrives while bash waits for a foreground child (a command
    # substitution, a plain sleep) can be taken as handled by that child.
    for _ in {1..200}; do sleep 0.05 & wait $!; done
  fi ;;
esac
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

func readLog(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.HasPrefix(l, "version|") {
			out = append(out, l)
		}
	}
	return out
}

func TestTerraformArgv(t *testing.T) {
	bin, log := fakeTerraform(t)
	// A missing CLI configuration is dropped: OpenTofu would print its
	// warning into the JSON on stdout.
	t.Setenv("TF_CLI_CONFIG_FILE", filepath.Join(t.TempDir(), "missing.tfrc"))
	tf, err := NewTerraform(bin, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	vars := map[string]string{"state_dir": "/tmp/lab", "node_count": "3", "base_port": "7100"}
	tf.SetVarFiles("/tmp/lab/secret.tfvars.json")
	if err := tf.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tf.Apply(ctx, vars, `terraform_data.node["2"]`); err != nil {
		t.Fatal(err)
	}
	out, err := tf.Output(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out["addrs"]); got != `["127.0.0.1:7101"]` {
		t.Errorf("output addrs: got %s, want [\"127.0.0.1:7101\"]", got)
	}
	if err := tf.Destroy(ctx, vars); err != nil {
		t.Fatal(err)
	}
	env := "env TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1 TF_CLI_CONFIG_FILE="
	want := []string{
		"init|-no-color|-input=false|-backend=true|-get=true|-upgrade=false", env,
		`apply|-no-color|-auto-approve|-input=false|-var-file=/tmp/lab/secret.tfvars.json|-lock=true|-parallelism=10|-refresh=true|-replace=terraform_data.node["2"]|-var|base_port=7100|-var|node_count=3|-var|state_dir=/tmp/lab`, env,
		"output|-no-color|-json", env,
		"destroy|-no-color|-auto-approve|-input=false|-lock-timeout=0s|-var-file=/tmp/lab/secret.tfvars.json|-lock=true|-parallelism=10|-refresh=true|-var|base_port=7100|-var|node_count=3|-var|state_dir=/tmp/lab", env,
	}
	got := readLog(t, log)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("argv:\ngot\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestTerraformErrorCarriesStderr(t *testing.T) {
	bin, _ := fakeTerraform(t)
	t.Setenv("FAKE_FAIL", "1")
	tf, err := NewTerraform(bin, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	err = tf.Apply(context.Background(), map[string]string{"node_count": "0"})
	var te *TerraformError
	if !errors.As(err, &te) {
		t.Fatalf("got %v (%T), want a *TerraformError", err, err)
	}
	if te.Op != "apply" || te.Binary != bin {
		t.Errorf("got op %q binary %q, want apply %q", te.Op, te.Binary, bin)
	}
	for _, s := range []string{"terraform apply", "exit status 1", "node_count must be an integer"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q: want it to contain %q", err, s)
		}
	}
	if n := strings.Count(err.Error(), "node_count must be"); n != 1 {
		t.Errorf("stderr appears %d times in the error, want once", n)
	}
}

func TestTerraformCancelSendsSIGINT(t *testing.T) {
	bin, log := fakeTerraform(t)
	started := filepath.Join(t.TempDir(), "started")
	t.Setenv("FAKE_WAIT", started)
	tf, err := NewTerraform(bin, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for !fileExists(started) {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	err = tf.Apply(ctx, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	got := readLog(t, log)
	if got[len(got)-1] != "INT" {
		t.Errorf("last log line: got %q, want INT (the child got SIGINT)", got[len(got)-1])
	}
}

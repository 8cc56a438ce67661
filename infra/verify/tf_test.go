package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/testenv"
)

// tfBinary returns the tofu or terraform binary the tests drive: $REDLAB_TF
// (the Makefile sets it), else tofu, else terraform from PATH.
func tfBinary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("REDLAB_TF"); p != "" {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
		testenv.Missing(tb, fmt.Sprintf("REDLAB_TF=%s is not an executable (run `make tools` to build OpenTofu into bin/)", p))
	}
	for _, name := range []string{"tofu", "terraform"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	testenv.Missing(tb, "neither tofu nor terraform is on PATH (run `make tools` and set REDLAB_TF=bin/tofu)")
	return ""
}

// requireProgram returns the path of a program the check needs (also looked
// for in the sbin directories), or ends the test by testenv.Missing.
func requireProgram(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		for _, dir := range []string{"/usr/sbin", "/sbin"} {
			if p := filepath.Join(dir, name); isExecutable(p) {
				return p
			}
		}
		testenv.Missing(tb, fmt.Sprintf("%s is not on PATH; install it (see .ci/run) to run this check", name))
	}
	return path
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// tfResult is one finished tofu/terraform run.
type tfResult struct {
	args   []string
	stdout string
	stderr string
	err    error
}

func (r tfResult) String() string {
	return fmt.Sprintf("%s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.err, r.stdout, r.stderr)
}

// runTF runs the binary in dir with a clean, offline-friendly environment.
func runTF(ctx context.Context, bin, dir string, args ...string) tfResult {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"CHECKPOINT_DISABLE=1", // terraform otherwise calls checkpoint-api.hashicorp.com
		"TF_IN_AUTOMATION=1",
		"TF_INPUT=0",
		"NO_COLOR=1",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return tfResult{args: append([]string{filepath.Base(bin)}, args...), stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// tfContext bounds one Terraform step; a hung binary fails the test instead of
// the whole package timing out.
func tfContext(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

// moduleDirEnv names, for the mutation test of the AWS module's static
// checks, a mutated copy of infra/modules to check instead.
const moduleDirEnv = "REDLAB_VERIFY_MODULES"

// moduleDir returns the absolute path of infra/modules/<name> (under
// $REDLAB_VERIFY_MODULES when set).
func moduleDir(tb testing.TB, name string) string {
	tb.Helper()
	if root := os.Getenv(moduleDirEnv); root != "" {
		return filepath.Join(root, name)
	}
	dir, err := filepath.Abs(filepath.Join("..", "modules", name))
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

// copyTree copies the regular files of src into dst, leaving out Terraform's
// working directories and state, so a copy can be mutated or initialised
// without touching the repository.
func copyTree(tb testing.TB, src, dst string) {
	tb.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".terraform" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if strings.HasPrefix(d.Name(), "terraform.tfstate") || d.Name() == ".terraform.lock.hcl" || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		tb.Fatalf("copy %s: %v", src, err)
	}
}

// node is what redis-node renders for one set of variables.
type node struct {
	RedisConf           string  `json:"redis_conf"`
	ChronyConf          string  `json:"chrony_conf"`
	ChronyDropin        string  `json:"chrony_dropin"`
	SysctlConf          string  `json:"sysctl_conf"`
	FstabLine           string  `json:"fstab_line"`
	RedisUnit           string  `json:"redis_unit"`
	UnitName            string  `json:"unit_name"`
	RestartGuard        string  `json:"restart_guard"`
	RestartDelaySeconds float64 `json:"restart_delay_seconds"`
	TmpfilesConf        string  `json:"tmpfiles_conf"`
	CloudInit           string  `json:"cloud_init"`
	TLSFetchUnit        string  `json:"tls_fetch_unit"`
}

// render applies a root module calling redis-node once per entry of vars
// (module name -> its arguments) in a temporary directory, and returns the
// outputs of each call.
func render(tb testing.TB, vars map[string]map[string]any) map[string]node {
	tb.Helper()
	bin := tfBinary(tb)
	work := tb.TempDir()
	copyTree(tb, moduleDir(tb, "redis-node"), filepath.Join(work, "redis-node"))

	modules := map[string]any{}
	outputs := map[string]any{}
	for name, args := range vars {
		call := map[string]any{"source": "./redis-node"}
		for k, v := range args {
			call[k] = v
		}
		modules[name] = call
		outputs[name] = map[string]any{"value": "${module." + name + "}", "sensitive": true}
	}
	root, err := json.MarshalIndent(map[string]any{"module": modules, "output": outputs}, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "main.tf.json"), root, 0o644); err != nil {
		tb.Fatal(err)
	}

	ctx := tfContext(tb)
	for _, args := range [][]string{
		{"init", "-input=false", "-no-color"},
		{"apply", "-auto-approve", "-input=false", "-no-color"},
	} {
		if r := runTF(ctx, bin, work, args...); r.err != nil {
			tb.Fatalf("render redis-node: %s", r)
		}
	}
	r := runTF(ctx, bin, work, "output", "-json")
	if r.err != nil {
		tb.Fatalf("render redis-node: %s", r)
	}
	var out map[string]struct {
		Value node `json:"value"`
	}
	// tofu prints CLI configuration warnings on stdout, before the JSON.
	doc := r.stdout
	if i := strings.Index(doc, "\n{"); i >= 0 && !strings.HasPrefix(doc, "{") {
		doc = doc[i+1:]
	}
	if err := json.Unmarshal([]byte(doc), &out); err != nil {
		tb.Fatalf("render redis-node: decode outputs: %v\n%s", err, r.stdout)
	}
	nodes := make(map[string]node, len(out))
	for name, o := range out {
		nodes[name] = o.Value
	}
	for name := range vars {
		if _, ok := nodes[name]; !ok {
			tb.Fatalf("render redis-node: no output for %q", name)
		}
	}
	return nodes
}

// writeFile writes data to dir/name with mode and returns the path.
func writeFile(tb testing.TB, dir, name, data string, mode os.FileMode) string {
	tb.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		tb.Fatal(err)
	}
	return path
}

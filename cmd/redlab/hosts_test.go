package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// TestHostsFromTofu applies a root module whose outputs are the recorded
// outputs of infra/envs/aws (infra/hosts/testdata), with the real tofu or
// terraform, and reads them back through `redlab hosts from-tofu`.
func TestHostsFromTofu(t *testing.T) {
	wd, _ := os.Getwd()
	bin, err := lab.FindTerraform(filepath.Dir(filepath.Dir(wd)))
	if err != nil {
		testenv.Missing(t, err.Error())
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "infra", "hosts", "testdata", "tofu-output-aws.json"))
	if err != nil {
		t.Fatal(err)
	}
	outs, err := hosts.ParseOutputJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(outs))
	for k := range outs {
		names = append(names, k)
	}
	sort.Strings(names)
	var tf strings.Builder
	for _, k := range names {
		// JSON is a valid HCL expression for these values.
		fmt.Fprintf(&tf, "output %q {\n  value = %s\n}\n", k, outs[k])
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(tf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-input=false"}, {"apply", "-input=false", "-auto-approve"}} {
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", bin, args[0], err, out)
		}
	}
	t.Setenv("REDLAB_TF", bin) // FindTerraform looks here first
	out := filepath.Join(t.TempDir(), "hosts.json")
	code, stdout, stderr := runArgs(t, "hosts", "from-tofu", dir, "--out", out, "--key", "/keys/redlock.pem", "--drill-environment")
	if code != exitOK {
		t.Fatalf("from-tofu: exit %d, stderr %s", code, stderr)
	}
	if !strings.Contains(stderr, "wrote 5 hosts") || stdout != "" {
		t.Errorf("from-tofu: stdout %q, stderr %q; want the count on stderr", stdout, stderr)
	}
	inv, err := hosts.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(inv.Hosts[4])
	if want := `{"name":"node-5","address":"10.0.2.11","redis":"10.0.2.11:6379","user":"admin","key":"/keys/redlock.pem","type":"vm","instance_id":"i-0a1b2c3d4e5f60005"}`; string(b) != want || !inv.DrillEnvironment {
		t.Errorf("host 5: got %s (drill %v), want %s (drill true)", b, inv.DrillEnvironment, want)
	}
	code, stdout, _ = runArgs(t, "hosts", "check", out)
	if code != exitOK || !strings.Contains(stdout, "5 hosts, drill environment: true") || !strings.Contains(stdout, "admin@10.0.2.11:22") {
		t.Errorf("check: exit %d, stdout %q", code, stdout)
	}

	if code, _, stderr := runArgs(t, "hosts", "from-tofu", filepath.Join(dir, "nope")); code != exitUsage || !strings.Contains(stderr, "want the directory") {
		t.Errorf("missing DIR: exit %d, stderr %q; want %d and why", code, stderr, exitUsage)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"hosts": [{"address": "a", "redis": "a:1", "user": "u", "type": "vm", "typo": 1}]}`), 0o644)
	if code, _, stderr := runArgs(t, "hosts", "check", bad); code != exitFailure || !strings.Contains(stderr, "hosts[0].typo: unknown field") {
		t.Errorf("bad file: exit %d, stderr %q", code, stderr)
	}
}

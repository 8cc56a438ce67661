package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/internal/etcdtest"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// TestReadmeQuickStart runs the README's quick start, line by line as a user
// would paste it, twice in a row in the same directory, as a user trying it
// again would, so that it cannot rot. Two things differ from a user's
// shell, both for the test's sake: the binaries were built by the test and
// the set-up (the lines that run make are skipped, but for `make tools`
// behind a tofu or terraform found on PATH), and the lab moves to a free
// port range (other tests run labs at the same time).
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("the quick start runs a lab, two loads and a drill")
	}
	bin, tf := testenv.RequireLab(t, lab.FindTerraform)
	testenv.Require(t, "bash")
	etcd, err := etcdtest.Binary()
	if err != nil {
		testenv.Missing(t, err.Error())
	}
	if etcd, err = filepath.Abs(etcd); err != nil {
		t.Fatal(err)
	}
	repo := testenv.RepoRoot(t)
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	script := quickStart(t, string(readme), "quickstart")

	// A fresh working directory laid out like a clone: bin/redlab, bin/etcd
	// (the drill's etcd members), the runbooks, the infra directory the
	// lab is provisioned from, and the foreign guards' adapters (the
	// drill's node-redlock, with the packages setup.sh installed).
	dir := t.TempDir()
	for link, target := range map[string]string{
		"bin/redlab": bin, "bin/etcd": etcd, "runbooks": filepath.Join(repo, "runbooks"), "infra": filepath.Join(repo, "infra"),
		"inventory/foreign": filepath.Join(repo, "inventory", "foreign"),
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, link)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	base := redistest.FreeStableBasePort(t, lab.DefaultCount, lab.PortOffsets(0)...)
	var lines []string
	for _, l := range strings.Split(script, "\n") {
		switch {
		case strings.HasPrefix(l, "make "):
			continue
		case strings.Contains(l, "bin/redlab lab up"):
			l = strings.Replace(l, "bin/redlab lab up", fmt.Sprintf("bin/redlab lab up --base-port %d", base), 1)
		}
		lines = append(lines, l)
	}
	t.Cleanup(func() {
		cmd := exec.Command(bin, "lab", "down", "--state-dir", filepath.Join(dir, lab.DefaultStateDir))
		cmd.Dir = dir
		_ = cmd.Run()
	})

	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDLAB_") || strings.HasPrefix(kv, "REDLAB_TF=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+terraformOnPath(t, tf))
	for run := 1; run <= 2; run++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-x", "-c", strings.Join(lines, "\n"))
		cmd.Dir = dir
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("run %d of the quick start failed: %v\n%s", run, err, out)
		}
		checkQuickStart(t, run, string(out))
	}
}

// terraformOnPath returns $PATH with tofu or terraform on it: the
// quick start's set-up line looks for them there before building one.
func terraformOnPath(t *testing.T, tf string) string {
	t.Helper()
	path := os.Getenv("PATH")
	for _, name := range []string{"tofu", "terraform"} {
		if _, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	dir := t.TempDir()
	if err := os.Symlink(tf, filepath.Join(dir, "tofu")); err != nil {
		t.Fatal(err)
	}
	return dir + string(os.PathListSeparator) + path
}

// checkQuickStart checks one run's output.
func checkQuickStart(t *testing.T, run int, out string) {
	t.Helper()
	for _, want := range []string{
		"export REDLAB_NODES=",                                  // lab up
		"5 nodes; ",                                             // doctor, logged in as the lab's monitor user
		"runs/quickstart/report.html",                           // the first load
		"runs/quickstart-kill/report.html",                      // the load with a node down
		"kill node 2: down; its restart guard holds Redis back", // the fault
		"is clear",                           // lab down
		"drill client-pause: PASS",           // the drill
		"safety: double grants 0 (lock viol", // the loads were safe
	} {
		if !strings.Contains(out, want) {
			t.Errorf("run %d of the quick start: the output lacks %q:\n%s", run, want, out)
		}
	}
	noMapInOutput(t, []string{"(the quick start)"}, out)
}

// quickStart returns the shell block between the README's markers
// <!-- name:begin --> and <!-- name:end -->.
func quickStart(t *testing.T, readme, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "<!-- "+name+":begin -->")
	block, _, ok2 := strings.Cut(rest, "<!-- "+name+":end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no quick-start markers")
	}
	_, code, ok := strings.Cut(block, "```sh\n")
	code, _, ok2 = strings.Cut(code, "```")
	if !ok || !ok2 || strings.TrimSpace(code) == "" {
		t.Fatal("README.md's quick start has no sh block")
	}
	return code
}

// TestReadmeQuickStartTLS runs the README's TLS variant of the quick start,
// as TestReadmeQuickStart runs the quick start: a TLS lab, the doctor's TLS
// lines and a load over TLS.
func TestReadmeQuickStartTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("the TLS quick start runs a lab and a load")
	}
	bin, _ := testenv.RequireLab(t, lab.FindTerraform)
	testenv.Require(t, "bash")
	wd, _ := os.Getwd()
	repo := filepath.Dir(filepath.Dir(wd))
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	script := quickStart(t, string(readme), "quickstart-tls")
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"bin/redlab": bin, "infra": filepath.Join(repo, "infra")} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	base := redistest.FreeStableBasePort(t, lab.DefaultCount, lab.PortOffsets(0)...)
	script = strings.Replace(script, "bin/redlab lab up", fmt.Sprintf("bin/redlab lab up --base-port %d", base), 1)
	t.Cleanup(func() {
		cmd := exec.Command(bin, "lab", "down", "--state-dir", filepath.Join(dir, lab.DefaultStateDir))
		cmd.Dir = dir
		_ = cmd.Run()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-x", "-c", script)
	cmd.Dir = dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDLAB_") || strings.HasPrefix(kv, "REDLAB_TF=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the TLS quick start failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		"REDLAB_NODES=rediss://127.0.0.1:",   // lab up --tls
		"REDLAB_TLS_CA=",                     // and its CA
		"TLS 1.3, certificate valid until",   // doctor
		"5 nodes; ",                          // the doctor's summary
		"runs/quickstart-tls/report.html",    // the load
		"safety: double grants 0 (lock viol", // safe
		"is clear",                           // lab down
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the TLS quick start's output lacks %q:\n%s", want, out)
		}
	}
}

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/drill"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// TestDrillCheck: --check validates every runbook without a lab (exit 0),
// and refuses a bad spec with exit 2, naming the file, the line and the
// field, as a drill run would.
func TestDrillCheck(t *testing.T) {
	files, err := filepath.Glob("../../runbooks/drills/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no runbooks found: %v", err)
	}
	code, stdout, stderr := runArgs(t, append([]string{"drill", "--check"}, files...)...)
	if code != exitOK {
		t.Fatalf("drill --check on every runbook: got exit %d, want %d; stderr:\n%s", code, exitOK, stderr)
	}
	if !strings.Contains(stdout, "drill spec(s) valid") {
		t.Errorf("stdout: got %q, want the count of valid specs", stdout)
	}
	code, _, stderr = runArgs(t, "drill", "--check", "--matrix", "../../runbooks/drills")
	if code != exitOK {
		t.Fatalf("drill --check --matrix: got exit %d, want %d; stderr:\n%s", code, exitOK, stderr)
	}

	good, err := os.ReadFile("../../runbooks/drills/one-node-loss.md")
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(good), "rate: ", "rate: -", 1)
	if bad == string(good) {
		t.Fatal("one-node-loss.md has no workload rate to break")
	}
	path := filepath.Join(t.TempDir(), "bad.md")
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runArgs(t, "drill", "--check", path)
	if code != exitUsage {
		t.Fatalf("drill --check on a bad spec: got exit %d, want %d", code, exitUsage)
	}
	line := strings.Count(string(good)[:strings.Index(string(good), "rate: ")], "\n") + 1
	for _, want := range []string{fmt.Sprintf("%s:%d:", path, line), "workload.rate"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q does not name %q", stderr, want)
		}
	}
	if stdout != "" {
		t.Errorf("stdout on a usage error: got %q, want nothing", stdout)
	}
}

// TestDrillCheckHosts: --check --hosts reports every spec at once: which run
// over SSH, with the etcd guards they leave out, and why the others do not;
// a run without --check refuses with every reason too.
func TestDrillCheckHosts(t *testing.T) {
	var hs []string
	for i := 1; i <= 5; i++ {
		hs = append(hs, fmt.Sprintf(`{"address": "10.0.%d.10", "redis": "10.0.%d.10:6379", "user": "admin", "type": "vm"}`, i, i))
	}
	file := filepath.Join(t.TempDir(), "hosts.json")
	if err := os.WriteFile(file, []byte(`{"drill_environment": true, "hosts": [`+strings.Join(hs, ",")+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runArgs(t, "drill", "--check", "--hosts", file, "--matrix", "../../runbooks/drills")
	if code != exitUsage {
		t.Fatalf("got exit %d, want %d (some drills are the lab's)\nstdout:\n%s\nstderr:\n%s", code, exitUsage, stdout, stderr)
	}
	rows := map[string]string{}
	for line := range strings.Lines(stdout) {
		if f := strings.Fields(line); len(f) >= 2 && (f[1] == "yes" || f[1] == "no") {
			rows[f[0]] = strings.TrimSpace(line)
		}
	}
	files, _ := filepath.Glob("../../runbooks/drills/*.md")
	if len(rows) != len(files) {
		t.Errorf("got %d rows for %d drills:\n%s", len(rows), len(files), stdout)
	}
	for name, want := range map[string][]string{
		"one-node-loss":     {"yes", "runs without etcd, etcd-fenced"},
		"clock-jump":        {"yes"},
		"client-pause":      {"no", "scope process"},
		"etcd-leader-loss":  {"no", "faults on etcd members"},
		"replicas-as-nodes": {"no", "replicas"},
	} {
		for _, w := range want {
			if !strings.Contains(rows[name], w) {
				t.Errorf("row of %s: got %q, want %q in it", name, rows[name], w)
			}
		}
	}
	refused := strings.Count(stdout, "  no  ")
	if want := fmt.Sprintf("%d of %d drill specs run over SSH", len(files)-refused, len(files)); !strings.Contains(stdout, want) {
		t.Errorf("stdout lacks %q:\n%s", want, stdout)
	}
	if !strings.Contains(stderr, fmt.Sprintf("%d of %d drill specs cannot run over SSH", refused, len(files))) {
		t.Errorf("stderr: got %q, want the count of refused specs", stderr)
	}

	// Only specs that run: exit 0.
	code, stdout, stderr = runArgs(t, "drill", "--check", "--hosts", file, "../../runbooks/drills/one-node-loss.md", "../../runbooks/drills/clock-jump.md")
	if code != exitOK || !strings.Contains(stdout, "2 of 2 drill specs run over SSH") {
		t.Errorf("got exit %d, stdout %q, stderr %q; want 0 and both running", code, stdout, stderr)
	}

	// Without --check, every refusal is named before anything runs.
	code, _, stderr = runArgs(t, "drill", "--hosts", file, "../../runbooks/drills/client-pause.md", "../../runbooks/drills/etcd-leader-loss.md")
	if code != exitUsage || !strings.Contains(stderr, "2 of 2 drill specs cannot run over SSH") ||
		!strings.Contains(stderr, "client-pause") || !strings.Contains(stderr, "etcd-leader-loss") {
		t.Errorf("got exit %d, stderr %q; want 2 naming both refusals", code, stderr)
	}
}

// TestPrintResultNoAcquireWithoutALock: the drill's table prints no acquire
// p99 for a guard that takes no lock, rather than 0.0 ms.
func TestPrintResultNoAcquireWithoutALock(t *testing.T) {
	res := &drill.Result{Drill: "one-node-loss", Passed: true, GuardOrder: []string{"redlock", "db-atomic"}, Guards: map[string]*drill.GuardResult{
		"redlock":   {Passed: true, Availability: 1, AcquireP99Ms: 7.9},
		"db-atomic": {Passed: true, Availability: 1},
	}}
	var b strings.Builder
	printResult(&b, res, "runs/drills/one-node-loss")
	for line := range strings.Lines(b.String()) {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "redlock" && !strings.HasSuffix(strings.TrimSpace(line), "7.9 ms"):
			t.Errorf("redlock's row %q: want its acquire p99, 7.9 ms", line)
		case len(f) > 0 && f[0] == "db-atomic" && (strings.Contains(line, " ms") || f[len(f)-1] != "-"):
			t.Errorf("db-atomic's row %q: want - for its acquire p99", line)
		}
	}
}

// TestDrillRepeat: --repeat replays each drill on one lab and says how
// often its expectations held: a drill that holds every time reproduces
// 2/2, one whose harm never shows 0/2, and the command then fails.
func TestDrillRepeat(t *testing.T) {
	bin, _ := testenv.RequireLab(t, lab.FindTerraform)
	dir := t.TempDir()
	write := func(name, expect string) string {
		path := filepath.Join(dir, name+".md")
		body := fmt.Sprintf(`---
drill: %s
lab: {nodes: 3, restart_delay: 3s}
workload: {guards: [redlock], rate: 10, duration: 3s, keys: uniform:10, lock_ttl: 2s}
expect:
  redlock: [%q]
---
`, name, expect)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	held := write("repeat-held", "safety.lock_violations==0")
	never := write("repeat-never", "safety.lock_violations>0")
	cmd := exec.Command(bin, "drill", "--repeat", "2", "--out", filepath.Join(dir, "out"), held, never)
	cmd.Dir = testenv.RepoRoot(t)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFailure {
		t.Fatalf("drill --repeat 2: %v, want exit %d\n%s", err, exitFailure, out)
	}
	for _, want := range []string{"drill repeat-held: reproduced 2/2", "Successful reproduction", "drill repeat-never: reproduced 0/2", "Failed to reproduce"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

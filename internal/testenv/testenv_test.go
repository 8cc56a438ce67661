package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLookPath(t *testing.T) {
	if _, err := LookPath("sh"); err != nil {
		t.Fatalf("LookPath(sh): %v", err)
	}
	_, err := LookPath("redlab-no-such-binary")
	if err == nil || !strings.Contains(err.Error(), "redlab-no-such-binary is not on PATH") {
		t.Fatalf("LookPath of a missing binary: got %v, want a 'not on PATH' error", err)
	}
}

func TestMissingMain(t *testing.T) {
	t.Setenv("CI", "true")
	if code := MissingMain("x is missing"); code != 1 {
		t.Errorf("MissingMain under CI=true: exit %d, want 1", code)
	}
	t.Setenv("CI", "")
	if code := MissingMain("x is missing"); code != 0 {
		t.Errorf("MissingMain outside CI: exit %d, want 0", code)
	}
}

func TestRepoRoot(t *testing.T) {
	root := RepoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "module github.com/redlocklab/redlocklab") {
		t.Errorf("RepoRoot: got %s, whose go.mod is not this module's:\n%s", root, b)
	}
	if wd, _ := os.Getwd(); wd != filepath.Join(root, "internal", "testenv") {
		t.Errorf("RepoRoot: got %s, want the directory two above %s", root, wd)
	}
}

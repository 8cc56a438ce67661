package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The redlab binary Redlab builds, at most once per test binary, into a
// directory that Main removes.
var built struct {
	sync.Mutex
	main bool   // Main is running the tests
	dir  string // made on the first Redlab
	bin  string
	err  error
}

// Main runs the tests of m and then removes what Redlab built. A package
// whose tests call Redlab or RequireLab has
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
func Main(m *testing.M) int {
	built.Lock()
	built.main = true
	built.Unlock()
	code := m.Run()
	built.Lock()
	defer built.Unlock()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	return code
}

// Redlab returns the redlab binary built from this checkout's cmd/redlab.
// A lab's provisioners exec redlab, so a test binary cannot stand in for
// it. The binary is built on the first call and shared by the package's
// tests; a failed build fails the test.
func Redlab(tb testing.TB) string {
	tb.Helper()
	built.Lock()
	defer built.Unlock()
	if !built.main {
		tb.Fatal("testenv: Redlab needs the package's TestMain to call testenv.Main, which removes the binary")
	}
	if built.bin == "" && built.err == nil {
		built.dir, built.err = os.MkdirTemp("", "redlab-test-bin-")
		if built.err == nil {
			bin := filepath.Join(built.dir, "redlab")
			out, err := exec.Command("go", "build", "-o", bin, "github.com/redlocklab/redlocklab/cmd/redlab").CombinedOutput()
			if err != nil {
				built.err = fmt.Errorf("go build ./cmd/redlab: %w\n%s", err, out)
			} else {
				built.bin = bin
			}
		}
	}
	if built.err != nil {
		tb.Fatal(built.err)
	}
	return built.bin
}

// RepoRoot returns the root of this checkout: the nearest directory above
// the test's working directory that holds go.mod.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		} else if !errors.Is(err, os.ErrNotExist) {
			tb.Fatal(err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("testenv: no go.mod above the working directory")
		}
		dir = parent
	}
}

// RequireLab returns what a real lab needs, the redlab binary (Redlab) and
// a tofu or terraform binary, or ends the test by Missing when redis-server
// or tofu/terraform is not there. findTerraform is lab.FindTerraform, given
// the checkout's root; it is passed in so that infra/lab's own tests can
// use RequireLab.
func RequireLab(tb testing.TB, findTerraform func(roots ...string) (string, error)) (redlab, terraform string) {
	tb.Helper()
	Require(tb, "redis-server")
	tf, err := findTerraform(RepoRoot(tb))
	if err != nil {
		Missing(tb, err.Error())
	}
	return Redlab(tb), tf
}

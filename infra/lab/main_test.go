package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// The redlab binary the provisioners exec (the test binary cannot stand in
// for it), built at most once per test run into TestMain's temporary
// directory, and only when a test needs it.
var (
	binDir    string
	buildOnce sync.Once
	redlabBin string
	buildErr  error
)

func TestMain(m *testing.M) {
	var err error
	binDir, err = os.MkdirTemp("", "redlab-lab-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

func buildRedlab() (string, error) {
	buildOnce.Do(func() {
		redlabBin = filepath.Join(binDir, "redlab")
		out, err := exec.Command("go", "build", "-o", redlabBin, "github.com/redlocklab/redlocklab/cmd/redlab").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/redlab: %w\n%s", err, out)
		}
	})
	return redlabBin, buildErr
}

// requireLab returns what a real lab needs: the redlab binary and a tofu or
// terraform binary. Without redis-server or tofu/terraform the test ends by
// testenv.Missing: a failure under CI=true, a loud skip otherwise.
func requireLab(t *testing.T) (redlab, terraform string) {
	t.Helper()
	testenv.Require(t, "redis-server")
	tf, err := FindTerraform(repoRoot(t))
	if err != nil {
		testenv.Missing(t, err.Error())
	}
	bin, err := buildRedlab()
	if err != nil {
		t.Fatalf("redlab binary: %v", err)
	}
	return bin, tf
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(filepath.Dir(wd)) // infra/lab -> repo
}

// labPortOffsets are a lab's port ranges relative to its base port, with
// replicas (every range a test lab may use).
var labPortOffsets = PortOffsets(1)

// freeBasePort returns a base port whose three ranges for n nodes are free
// right now, below the ephemeral port range so that they stay free until
// the lab's processes bind them.
func freeBasePort(t *testing.T, n int) int {
	t.Helper()
	return redistest.FreeStableBasePort(t, n, labPortOffsets...)
}

func portsFree(base, n int) bool { return redistest.PortsFree(base, n, labPortOffsets...) }

// leftovers lists processes that still belong to the lab in dir: their
// argv mentions it or their working directory is inside it.
func leftovers(dir string) []string {
	var out []string
	for _, pid := range scanProc(func(pid int) bool {
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		return strings.HasPrefix(cwd, dir) || strings.Contains(strings.Join(cmdline(pid), " "), dir)
	}) {
		out = append(out, fmt.Sprintf("%d %q", pid, cmdline(pid)))
	}
	return out
}

// findRedis returns the live redis-server processes whose working
// directory is dataDir (the supervisor's own finder is package node's).
func findRedis(dataDir string) []int {
	return scanProc(func(pid int) bool {
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if err != nil || cwd != dataDir {
			return false
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return strings.HasPrefix(strings.TrimSpace(string(comm)), "redis-server")
	})
}

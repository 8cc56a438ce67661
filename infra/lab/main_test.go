package lab

import (
	"fmt"
	"github.com/redlocklab/redlocklab/internal/proc"
	"os"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

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
	for _, pid := range proc.Scan(func(pid int) bool {
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		return strings.HasPrefix(cwd, dir) || strings.Contains(strings.Join(proc.Cmdline(pid), " "), dir)
	}) {
		out = append(out, fmt.Sprintf("%d %q", pid, proc.Cmdline(pid)))
	}
	return out
}

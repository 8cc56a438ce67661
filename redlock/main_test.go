package redlock_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9/logging"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// sharedAddrs are five redis-server nodes started once by TestMain for the
// Example functions (which cannot take a *testing.T) and the benchmarks.
// Tests that kill or reconfigure nodes start their own via redistest.
var sharedAddrs []string

func TestMain(m *testing.M) {
	// Dead nodes are part of the tests; go-redis would log every refused dial.
	logging.Disable()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	bin, err := testenv.LookPath("redis-server")
	if err != nil {
		return testenv.MissingMain(err.Error())
	}
	dir, err := os.MkdirTemp("", "redlock-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "redlock test: ", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// Configured as the Redlock docs advise: AOF with appendfsync always.
	for i := range 5 {
		node, err := redistest.Launch(bin, filepath.Join(dir, fmt.Sprint(i)), redistest.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "redlock test: ", err)
			return 1
		}
		defer node.Kill()
		sharedAddrs = append(sharedAddrs, node.Addr)
	}
	return m.Run()
}

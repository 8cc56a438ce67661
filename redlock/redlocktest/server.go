package redlocktest

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// ServerPath returns the path of redis-server on PATH, or an error that
// says it is missing. For a TestMain, which has no testing.TB.
func ServerPath() (string, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server is not on PATH; install it (Debian: apt-get install redis-server) to run this test: %w", err)
	}
	return path, nil
}

// Server returns the path of redis-server, or ends the test when it is
// missing: a failure under CI=true, a loud skip otherwise.
func Server(tb testing.TB) string {
	tb.Helper()
	path, err := ServerPath()
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%v (CI=true, so this is a failure)", err)
		}
		tb.Skipf("SKIPPING: %v", err)
	}
	return path
}

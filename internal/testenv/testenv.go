// Package testenv holds the one rule every test harness here applies to a
// missing prerequisite (a binary, a server, a variable): with CI=true the
// test fails, so a broken CI setup can never pass silently; otherwise it is
// skipped with a loud message.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run under CI=true, where a missing
// prerequisite is a failure.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing ends a test that cannot run without something that is not there;
// why says what is missing and how to get it. Under CI=true the test fails,
// otherwise it is skipped.
func Missing(tb testing.TB, why string) {
	tb.Helper()
	if InCI() {
		tb.Fatalf("%s (CI=true, so this is a failure)", why)
	}
	tb.Skipf("SKIPPING: %s", why)
}

// MissingMain is Missing for a TestMain, which has no testing.TB: it reports
// why on stderr and returns the package's exit code, 1 under CI=true and 0
// (every test skipped) otherwise. The caller must not run the tests.
func MissingMain(why string) int {
	if InCI() {
		fmt.Fprintf(os.Stderr, "FAIL: %s (CI=true, so this is a failure)\n", why)
		return 1
	}
	fmt.Fprintf(os.Stderr, "SKIPPING every test of this package: %s\n", why)
	return 0
}

// LookPath returns the path of the named binary. When it is not on PATH the
// error says so and how to install it, ready for Missing or MissingMain.
func LookPath(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not on PATH; install it (see .ci/run) to run this test: %w", name, err)
	}
	return path, nil
}

// Require returns the path of the named binary, or ends the test by Missing
// when it is not on PATH.
func Require(tb testing.TB, name string) string {
	tb.Helper()
	path, err := LookPath(name)
	if err != nil {
		Missing(tb, err.Error())
	}
	return path
}

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// TestPlanUsageErrors: every bad command line is a usage error (exit 2)
// that says why, before anything is measured or written.
func TestPlanUsageErrors(t *testing.T) {
	t.Setenv(envNodes, "")
	t.Setenv(envStateDir, "")
	out := filepath.Join(t.TempDir(), "plan")
	nolab := filepath.Join(t.TempDir(), "no-lab")
	base := []string{"plan", "--out", out, "--state-dir", nolab}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no rate", []string{"--slo", "acquire.p99<10ms", "--hold", "1s"}, "--rate is required"},
		{"no SLO", []string{"--rate", "300", "--hold", "1s"}, "--slo is required"},
		{"no hold", []string{"--rate", "300", "--slo", "acquire.p99<10ms"}, "give the critical section's hold time"},
		{"two holds", []string{"--rate", "300", "--slo", "acquire.p99<10ms", "--hold", "1s", "--hold-from", "runs/x"}, "give the critical section's hold time"},
		{"a zero hold", []string{"--rate", "300", "--slo", "acquire.p99<10ms", "--hold", "0s"}, "a hold of 0"},
		{"a hold run that is not there", []string{"--rate", "300", "--slo", "acquire.p99<10ms", "--hold-from", filepath.Join(nolab, "run")}, "--hold-from"},
		{"an SLO on safety", []string{"--rate", "300", "--slo", "safety.lock_violations==0", "--hold", "1s"}, "safety is what --verify checks"},
		{"an even node count", []string{"--rate", "300", "--slo", "acquire.p99<10ms", "--hold", "1s", "--node-count", "4"}, "want 3, 5 or 7"},
		{"a zero rate", []string{"--rate", "0", "--slo", "acquire.p99<10ms", "--hold", "1s"}, "--rate must be positive"},
		{"no lab", []string{"--rate", "300", "--slo", "acquire.p99<10ms", "--hold", "1s"}, "no lab at " + nolab},
		{"a bad rate", []string{"--rate", "fast", "--slo", "acquire.p99<10ms", "--hold", "1s"}, "--rate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runArgs(t, append(append([]string(nil), base...), tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("got exit %d, stdout %q, stderr %q; want %d with %q", code, stdout, stderr, exitUsage, tc.want)
			}
		})
	}
	// --nodes and --hosts, and --state-dir with either, name the nodes twice.
	for _, args := range [][]string{
		{"plan", "--rate", "300", "--slo", "acquire.p99<10ms", "--hold", "1s", "--nodes", "127.0.0.1:1", "--hosts", "h.json"},
		{"plan", "--rate", "300", "--slo", "acquire.p99<10ms", "--hold", "1s", "--nodes", "127.0.0.1:1", "--state-dir", nolab},
	} {
		if code, _, stderr := runArgs(t, append(args, "--out", out)...); code != exitUsage || !strings.Contains(stderr, "give one") && !strings.Contains(stderr, "does not go with") {
			t.Errorf("%v: got exit %d, stderr %q; want a usage error", args, code, stderr)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a usage error created the out directory")
	}
}

// TestSweepUntilMissFlags: --until-miss and --refine stop at a miss, which
// --keep-going never does; --growth and --max-rate need --until-miss.
func TestSweepUntilMissFlags(t *testing.T) {
	t.Setenv(envNodes, "")
	five := "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4,127.0.0.1:5"
	out := filepath.Join(t.TempDir(), "sweep")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--keep-going", "--until-miss"}, "--keep-going runs every listed rate"},
		{[]string{"--growth", "3"}, "--growth and --max-rate go with --until-miss"},
		{[]string{"--until-miss", "--growth", "1"}, "--growth must be more than 1"},
	} {
		args := append([]string{"sweep", "--nodes", five, "--rates", "10", "--slo", "acquire.p99<10ms", "--out", out}, tc.args...)
		if code, _, stderr := runArgs(t, args...); code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: got exit %d, stderr %q; want %d with %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}

// TestPlanDoesNotMeet runs `redlab plan` on a lab of five nodes for
// 50,000 reservations per second, which no lab on one machine does: exit 1,
// "does not meet" with the knee and the limiting resource on stderr, and
// the plan's files written all the same.
func TestPlanDoesNotMeet(t *testing.T) {
	bin, _ := testenv.RequireLab(t, lab.FindTerraform)
	infra := filepath.Join(testenv.RepoRoot(t), "infra")
	dir := filepath.Join(t.TempDir(), "state")
	base := redistest.FreeStableBasePort(t, 5, lab.PortOffsets(0)...)
	redlab := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), envStateDir+"="+dir, lab.CredentialsEnv+"="+filepath.Join(dir, "credentials.json"), envNodes+"=")
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stdout.String(), stderr.String()
	}
	t.Cleanup(func() { redlab("lab", "down") })
	if code, _, stderr := redlab("lab", "up", "--base-port", fmt.Sprint(base), "--infra-dir", infra); code != exitOK {
		t.Fatalf("lab up: exit %d\n%s", code, stderr)
	}
	out := filepath.Join(t.TempDir(), "plan")
	code, stdout, stderr := redlab("plan", "--rate", "50000", "--slo", "acquire.p99<10ms", "--hold", "uniform:100ms:300ms", "--step-duration", "1s", "--out", out)
	if code != exitFailure {
		t.Fatalf("got exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitFailure, stdout, stderr)
	}
	if !regexp.MustCompile(`redlab plan: does not meet 50000/s under acquire\.p99<10ms: limited by (disk|round trips|CPU|unknown): `).MatchString(stderr) {
		t.Errorf("stderr does not say why:\n%s", stderr)
	}
	if !strings.Contains(stderr, "the knee is") && !strings.Contains(stderr, "no step met the SLO") {
		t.Errorf("stderr names no knee:\n%s", stderr)
	}
	for _, f := range []string{"plan.md", "plan.json", "plan.html", "terraform.tfvars"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("no %s: %v", f, err)
		}
	}
	if !strings.Contains(stdout, "headroom (knee)") || !strings.Contains(stdout, "plan: "+filepath.Join(out, "plan.md")) {
		t.Errorf("stdout lacks the values or the files:\n%s", stdout)
	}
}

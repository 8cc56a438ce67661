package verify

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// guard runs one rendered restart guard against its own state directories.
type guard struct {
	path, stateDir, runtimeDir string
	delay                      time.Duration
}

// renderGuards renders the guard with max_lock_ttl 1 s and restart_margin
// 0.5 s, with and without persistence.
func renderGuards(t *testing.T) (durable, volatile guard) {
	t.Helper()
	root := t.TempDir()
	vars := map[string]map[string]any{}
	for _, name := range []string{"durable", "volatile"} {
		vars[name] = map[string]any{
			"max_lock_ttl":      1,
			"restart_margin":    0.5,
			"clock_drift_ratio": 0,
			"acl_enabled":       false,
			"persistence":       name == "durable",
			"guard_state_dir":   filepath.Join(root, name, "state"),
			"guard_runtime_dir": filepath.Join(root, name, "run"),
		}
	}
	nodes := render(t, vars)
	mk := func(name string) guard {
		n := nodes[name]
		if n.RestartDelaySeconds != 1.5 {
			t.Fatalf("%s: restart_delay_seconds = %v, want 1.5", name, n.RestartDelaySeconds)
		}
		return guard{
			path:       writeFile(t, filepath.Join(root, name), "restart-guard", n.RestartGuard, 0o755),
			stateDir:   filepath.Join(root, name, "state"),
			runtimeDir: filepath.Join(root, name, "run"),
			delay:      1500 * time.Millisecond,
		}
	}
	return mk("durable"), mk("volatile")
}

// run executes the guard. delayOverride, when not empty, is passed as
// REDIS_GUARD_DELAY. It returns stderr, the exit code and the wall time.
func (g guard) run(t *testing.T, delayOverride string, args ...string) (string, int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, g.path, args...)
	cmd.Env = os.Environ()
	if delayOverride != "" {
		cmd.Env = append(cmd.Env, "REDIS_GUARD_DELAY="+delayOverride)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	elapsed := time.Since(start)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stderr.String(), 0, elapsed
	case errors.As(err, &exit):
		return stderr.String(), exit.ExitCode(), elapsed
	default:
		t.Fatalf("run guard %v: %v", args, err)
		return "", -1, 0
	}
}

// must runs the guard and fails the test unless it exits 0.
func (g guard) must(t *testing.T, delayOverride string, args ...string) (string, time.Duration) {
	t.Helper()
	stderr, code, elapsed := g.run(t, delayOverride, args...)
	if code != 0 {
		t.Fatalf("guard %v: exit %d, want 0\n%s", args, code, stderr)
	}
	return stderr, elapsed
}

// reset forgets all state, as after the very first boot.
func (g guard) reset(t *testing.T) {
	t.Helper()
	for _, dir := range []string{g.stateDir, g.runtimeDir} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
}

// booted brings the guard to "Redis is running since this boot" without
// waiting: the first start since boot waits, here for no time.
func (g guard) booted(t *testing.T) {
	t.Helper()
	g.reset(t)
	g.must(t, "0", "pre-start")
}

// A clean start must not wait; to make "did not wait" unmistakable without a
// tight timing bound, those runs get REDIS_GUARD_DELAY=60 and must finish in
// well under that.
const (
	longDelay    = "60"
	longDelayDur = 60 * time.Second
)

// TestRestartGuard runs the rendered guard for real: it holds Redis back for
// at least the delay after an unclean stop or a boot, and not after a clean
// stop. The lower bounds are the feature, so they are asserted; the only upper
// bound is "did not sleep a 60 s delay".
func TestRestartGuard(t *testing.T) {
	requireProgram(t, "bash")
	durable, volatile := renderGuards(t)

	t.Run("unclean stop waits the rendered delay", func(t *testing.T) {
		durable.booted(t)
		durable.must(t, "", "post-stop", "unclean")
		stderr, elapsed := durable.must(t, "", "pre-start")
		if elapsed < durable.delay {
			t.Errorf("pre-start after an unclean stop returned after %v, want at least %v", elapsed, durable.delay)
		}
		if !strings.Contains(stderr, "last stop was 'unclean'") {
			t.Errorf("stderr: got %q, want the reason", stderr)
		}
	})

	t.Run("clean stop does not wait", func(t *testing.T) {
		durable.booted(t)
		durable.must(t, "", "post-stop", "clean")
		stderr, elapsed := durable.must(t, longDelay, "pre-start")
		if elapsed >= longDelayDur/2 {
			t.Errorf("pre-start after a clean stop took %v, want no wait", elapsed)
		}
		if !strings.Contains(stderr, "starting Redis now") {
			t.Errorf("stderr: got %q, want the no-wait message", stderr)
		}
	})

	waits := []struct {
		name  string
		setup func(t *testing.T, g guard)
		g     guard
		why   string
	}{
		{"first start since boot", func(t *testing.T, g guard) { g.reset(t) }, durable, "first start since boot"},
		{"boot after a clean stop", func(t *testing.T, g guard) {
			g.booted(t)
			g.must(t, "", "post-stop", "clean")
			if err := os.RemoveAll(g.runtimeDir); err != nil { // what a reboot does to tmpfs
				t.Fatal(err)
			}
		}, durable, "first start since boot"},
		{"post-stop never ran", func(t *testing.T, g guard) { g.booted(t) }, durable, "last stop was 'running'"},
		{"stopped while still waiting", func(t *testing.T, g guard) {
			g.booted(t)
			g.must(t, "", "post-stop", "unclean")
			// systemd stopped the unit during the wait: SERVICE_RESULT is
			// success, but Redis never ran, so the data is still suspect.
			g.must(t, "", "post-stop", "clean")
		}, durable, "last stop was 'unclean'"},
		{"no persistence, clean stop", func(t *testing.T, g guard) {
			g.booted(t)
			g.must(t, "", "post-stop", "clean")
		}, volatile, "persistence is off"},
	}
	for _, c := range waits {
		t.Run(c.name+" waits", func(t *testing.T) {
			c.setup(t, c.g)
			const override = 300 * time.Millisecond
			stderr, elapsed := c.g.must(t, "0.3", "pre-start")
			if elapsed < override {
				t.Errorf("pre-start returned after %v, want at least REDIS_GUARD_DELAY=%v", elapsed, override)
			}
			if !strings.Contains(stderr, c.why) || !strings.Contains(stderr, "0.3s") {
				t.Errorf("stderr: got %q, want the reason %q and the delay 0.3s", stderr, c.why)
			}
		})
	}

	t.Run("usage errors", func(t *testing.T) {
		durable.booted(t)
		durable.must(t, "", "post-stop", "clean")
		for _, c := range []struct {
			env  string
			args []string
		}{
			{"", nil},
			{"", []string{"start"}},
			{"", []string{"pre-start", "now"}},
			{"", []string{"post-stop"}},
			{"", []string{"post-stop", "maybe"}},
			{"abc", []string{"pre-start"}},
			{"-1", []string{"pre-start"}},
		} {
			stderr, code, _ := durable.run(t, c.env, c.args...)
			if code != 2 {
				t.Errorf("guard %v with REDIS_GUARD_DELAY=%q: exit %d, want 2\n%s", c.args, c.env, code, stderr)
			}
		}
		// A rejected call must not have touched the state: still clean.
		if _, elapsed := durable.must(t, longDelay, "pre-start"); elapsed >= longDelayDur/2 {
			t.Errorf("usage errors changed the recorded state (pre-start waited %v)", elapsed)
		}
	})
}

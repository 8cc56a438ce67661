package hostfault

import (
	"context"
	"errors"
	"github.com/redlocklab/redlocklab/infra/fault"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/remote"
	"github.com/redlocklab/redlocklab/internal/sshtest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// copyFile copies src (symlinks followed) to dst with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		testenv.Missing(t, err.Error())
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSSHMachineFaults is the whole path on a host of type machine: SSH
// to an sshd that the machine's own systemd runs (with the machine's
// capabilities, as on a host redlab does not own), then the faults, the
// switch and the heals over that connection. The image has no sshd, so the
// test lends it this host's (both are Debian 12).
func TestSSHMachineFaults(t *testing.T) {
	for _, f := range []string{"/usr/sbin/sshd", "/lib/x86_64-linux-gnu/libwrap.so.0"} {
		if _, err := os.Stat(f); err != nil {
			testenv.Missing(t, f+" is missing: install openssh-server (scripts/setup.sh test does)")
		}
	}
	r, root := bootMachineRoot(t)
	ctx := context.Background()
	copyFile(t, "/usr/sbin/sshd", filepath.Join(root, "usr/local/sbin/redlab-test-sshd"), 0o755)
	copyFile(t, "/lib/x86_64-linux-gnu/libwrap.so.0", filepath.Join(root, "usr/lib/x86_64-linux-gnu/libwrap.so.0"), 0o644)
	port := sshtest.FreePort(t)
	srv, conf := sshtest.Prepare(t, root, "/etc/redlab-test-sshd", port, "root")
	run(t, r, "id sshd >/dev/null 2>&1 || useradd --system --no-create-home --home-dir /run/sshd --shell /usr/sbin/nologin sshd; mkdir -p /run/sshd")
	run(t, r, "systemd-run --quiet --unit=redlab-test-sshd /usr/local/sbin/redlab-test-sshd -D -e -f "+conf)
	t.Cleanup(func() { _, _ = r.Run(context.Background(), "systemctl stop redlab-test-sshd") })
	if err := sshtest.WaitListening(srv.Host.SSHAddress(), nil); err != nil {
		j, _ := r.Run(ctx, "journalctl --no-pager -u redlab-test-sshd")
		t.Fatalf("the machine's sshd: %v\n%s", err, j)
	}
	h := srv.Host
	h.Type = hosts.Machine
	c, err := remote.Dial(ctx, h, remote.Config{KnownHosts: srv.KnownHosts})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// The premise: a session on the machine has no CAP_SYS_TIME.
	status, err := c.Run(ctx, "grep CapEff /proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`CapEff:\s*[0-9a-f]*[2367abef][0-9a-f]{6}\n`).MatchString(status) {
		t.Fatalf("the machine's session has CAP_SYS_TIME (%q): this test must not go on", status)
	}

	t.Run("kill over SSH arms, heal disarms", func(t *testing.T) {
		f, err := Inject(ctx, c, Fault{Kind: "kill", Host: h}, fault.Params{}, Options{Horizon: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if out, _ := c.Run(ctx, "systemctl is-active "+HealUnitPrefix+f.ID+".timer"); strings.TrimSpace(out) != "active" {
			t.Errorf("dead-man timer %q, want active", out)
		}
		if err := Heal(ctx, c, f); err != nil {
			t.Fatal(err)
		}
		if out, _ := c.Run(ctx, "systemctl is-active "+HealUnitPrefix+f.ID+".timer"); strings.TrimSpace(out) == "active" {
			t.Errorf("after heal the timer is %q", out)
		}
		waitFor(t, r, "redis back", "systemctl show -p SubState --value redlock-redis", "\nrunning\n")
	})

	t.Run("a pause whose runner is gone heals itself", func(t *testing.T) {
		f, err := Inject(ctx, c, Fault{Kind: "pause", Host: h}, fault.Params{fault.For: {D: time.Second}}, Options{Margin: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c.Close() // the runner is gone
		waitFor(t, r, "the switch's heal", `grep '^State:' /proc/$(`+mainPID+`)/status`, "S (sleeping)")
		waitFor(t, r, "the heal file gone", "[ -e "+StateDir+"/"+f.ID+".heal ] || echo gone", "gone")
		c, err = remote.Dial(ctx, h, remote.Config{KnownHosts: srv.KnownHosts})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a clock step is refused by the host itself, saying why", func(t *testing.T) {
		// Declared a VM, so that only the host's own check stands between
		// the step and the clock; the step is 0, which never moves a clock
		// even if that check failed (a machine's clock is this host's).
		vm := h
		vm.Type = hosts.VM
		_, err := Inject(ctx, c, Fault{Kind: "clock-jump", Host: vm}, fault.Params{"by": {D: 0}}, Options{})
		var xe *remote.ExitError
		if !errors.As(err, &xe) || !strings.Contains(xe.Stderr, "this host cannot step its clock: it is a container") {
			t.Fatalf("got %v, want the host's refusal", err)
		}
		// The refused fault is healed and its switch disarmed at once.
		if out, _ := c.Run(ctx, "systemctl list-units --all --plain --no-legend 'redlab-heal-*.timer'; ls "+StateDir); strings.TrimSpace(out) != "" {
			t.Errorf("after the refusal the host still has %q", out)
		}
	})

	t.Run("heal over SSH sweeps a bare stop", func(t *testing.T) {
		if _, err := c.Run(ctx, "systemctl stop redlock-redis"); err != nil {
			t.Fatal(err)
		}
		out, err := HealAll(ctx, c, hosts.Host{Type: hosts.Machine})
		if err != nil || !strings.Contains(out, "healed: started redlock-redis") {
			t.Errorf("heal: %q, %v; want it to start redlock-redis", out, err)
		}
		waitFor(t, r, "redis back", "systemctl is-active redlock-redis", "\nactive\n")
	})
	c.Close()
}

package hostfault

import (
	"context"
	"errors"
	"github.com/redlocklab/redlocklab/infra/fault"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/machine"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// machineRunner runs the scripts inside a booted machine, as root: the SSH
// transport is tested on its own (infra/remote); this is the other half,
// the scripts against a real systemd.
type machineRunner struct{ m *machine.Machine }

func (r machineRunner) Run(ctx context.Context, script string) (string, error) {
	return r.m.Exec(ctx, "/bin/sh", "-c", script)
}

// A Redis unit by the node's name, with the same Restart=always; Redis on a
// Unix socket only, since machines share the host's network.
const testUserData = `#cloud-config
write_files:
  - path: /etc/systemd/system/redlock-redis.service
    content: |
      [Service]
      ExecStart=/usr/bin/redis-server --port 0 --unixsocket /run/redlock-redis.sock --save "" --appendonly no
      Restart=always
      RestartSec=1
  - path: /etc/redis/redlock.conf
    content: |
      appendonly yes
      appendfsync always
runcmd:
  - [systemctl, daemon-reload]
  - [systemctl, start, redlock-redis]
`

func bootMachine(t *testing.T) machineRunner {
	t.Helper()
	r, _ := bootMachineRoot(t)
	return r
}

// bootMachineRoot boots a machine and returns it with its root file system
// as this host sees it.
func bootMachineRoot(t *testing.T) (machineRunner, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "booting a machine needs root")
	}
	for _, p := range []string{"systemd-nspawn", "nsenter", "debootstrap"} {
		if _, err := exec.LookPath(p); err != nil {
			testenv.Missing(t, p+" is missing: apt-get install systemd-container util-linux debootstrap")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	img, err := machine.EnsureImage(ctx, machine.ImageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "m")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := machine.New(machine.Config{Name: "redlab-hostfault-test", Image: img, Dir: dir, UserData: []byte(testUserData)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r := machineRunner{m}
	waitFor(t, r, "redis active", `systemctl is-active redlock-redis`, "\nactive\n")
	return r, filepath.Join(dir, "root")
}

// waitFor polls script until its output contains want.
func waitFor(t *testing.T, r machineRunner, what, script, want string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := r.Run(context.Background(), script)
		if strings.Contains("\n"+out, want) {
			return out
		}
		if time.Now().After(deadline) {
			j, _ := r.Run(context.Background(), "systemctl status redlock-redis; journalctl -b --no-pager -n 40 -u redlock-redis")
			t.Fatalf("%s: %q after 60s, want %q\n%s", what, out, want, j)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func run(t *testing.T, r machineRunner, script string) string {
	t.Helper()
	out, err := r.Run(context.Background(), script)
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	return out
}

const mainPID = `systemctl show -p MainPID --value redlock-redis`

// TestMachineFaultScripts runs the table's scripts against a real systemd in
// a lab machine: the switch is armed, a heal disarms it, an unhealed fault
// heals itself when the switch fires, and the heal of everything finds what
// is left.
func TestMachineFaultScripts(t *testing.T) {
	r := bootMachine(t)
	ctx := context.Background()
	h := hosts.Host{Address: "machine", Redis: "127.0.0.1:6379", User: "root", Type: hosts.Machine}

	t.Run("kill restarts through the unit; heal disarms", func(t *testing.T) {
		before := strings.TrimSpace(run(t, r, mainPID))
		f, err := Inject(ctx, r, Fault{Kind: "kill", Host: h}, fault.Params{}, Options{Horizon: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if out := run(t, r, "systemctl is-active "+HealUnitPrefix+f.ID+".timer"); strings.TrimSpace(out) != "active" {
			t.Errorf("dead-man timer: %q, want active", out)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			pid := strings.TrimSpace(run(t, r, mainPID))
			if pid != before && pid != "0" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("MainPID still %s 30s after the kill", pid)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := Heal(ctx, r, f); err != nil {
			t.Fatal(err)
		}
		if out, _ := r.Run(ctx, "systemctl is-active "+HealUnitPrefix+f.ID+".timer"); strings.TrimSpace(out) == "active" {
			t.Errorf("after heal the timer is %q, want it gone", out)
		}
		if out := run(t, r, "ls "+StateDir); strings.Contains(out, f.ID) {
			t.Errorf("after heal %s still holds %q", StateDir, out)
		}
	})

	t.Run("an unhealed pause heals itself when the switch fires", func(t *testing.T) {
		waitFor(t, r, "redis running", "systemctl show -p SubState --value redlock-redis", "\nrunning\n")
		f, err := Inject(ctx, r, Fault{Kind: "pause", Host: h}, fault.Params{fault.For: {D: time.Second}}, Options{Margin: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if f.DeadMan != 2*time.Second {
			t.Errorf("dead man %v, want For+Margin = 2s", f.DeadMan)
		}
		pidState := `grep '^State:' /proc/$(` + mainPID + `)/status`
		if out := run(t, r, pidState); !strings.Contains(out, "T (stopped)") {
			t.Errorf("after the pause: %q, want stopped (T)", out)
		}
		waitFor(t, r, "the switch's heal", pidState, "S (sleeping)")
		waitFor(t, r, "the heal file gone", "[ -e "+StateDir+"/"+f.ID+".heal ] || echo gone", "gone")
		if out, _ := r.Run(ctx, "systemctl is-active "+HealUnitPrefix+f.ID+".timer"); strings.TrimSpace(out) == "active" {
			t.Errorf("after the switch fired its timer is %q, want it gone", out)
		}
	})

	t.Run("restart adds its drop-in; heal removes it", func(t *testing.T) {
		f, err := Inject(ctx, r, Fault{Kind: "restart", Host: h}, fault.Params{"delay": {D: 2 * time.Second}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if out := run(t, r, "systemctl show -p Environment --value redlock-redis"); !strings.Contains(out, "REDIS_GUARD_DELAY=2") {
			t.Errorf("unit environment %q, want REDIS_GUARD_DELAY=2", out)
		}
		if err := Heal(ctx, r, f); err != nil {
			t.Fatal(err)
		}
		if out := run(t, r, "systemctl show -p Environment --value redlock-redis"); strings.Contains(out, "REDIS_GUARD_DELAY") {
			t.Errorf("after heal the environment is %q, want no REDIS_GUARD_DELAY", out)
		}
	})

	t.Run("heal of everything finds a stop and a pause left behind", func(t *testing.T) {
		stop, err := Inject(ctx, r, Fault{Kind: "stop", Host: h}, fault.Params{}, Options{Horizon: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if out, _ := r.Run(ctx, "systemctl is-active redlock-redis"); strings.TrimSpace(out) != "inactive" {
			t.Fatalf("after stop: %q, want inactive", out)
		}
		out, err := HealAll(ctx, r, hosts.Host{Type: hosts.Machine})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"healed: fault " + stop.ID, "disarmed: " + HealUnitPrefix + stop.ID + ".timer"} {
			if !strings.Contains(out, want) {
				t.Errorf("heal output %q lacks %q", out, want)
			}
		}
		waitFor(t, r, "redis back", "systemctl is-active redlock-redis", "\nactive\n")
		// A pause whose heal file is gone (as if /run had been wiped):
		// the sweep still finds the stopped process.
		run(t, r, "systemctl kill -s SIGSTOP redlock-redis")
		out, err = HealAll(ctx, r, hosts.Host{Type: hosts.Machine})
		if err != nil || !strings.Contains(out, "healed: redlock-redis was paused") {
			t.Errorf("sweep of a bare SIGSTOP: %q, %v", out, err)
		}
		if out, _ := HealAll(ctx, r, hosts.Host{Type: hosts.Machine}); strings.Contains(out, "healed") {
			t.Errorf("a second heal found %q, want nothing", out)
		}
	})

	t.Run("weaken edits the profile; restore puts it back", func(t *testing.T) {
		prod := run(t, r, "cat /etc/redis/redlock.conf")
		if err := Weaken(ctx, &hosts.Inventory{}, r, "everysec"); !errors.Is(err, hosts.ErrNotDrillEnvironment) {
			t.Fatalf("not a drill environment: got %v, want ErrNotDrillEnvironment", err)
		}
		if got := run(t, r, "cat /etc/redis/redlock.conf"); got != prod {
			t.Fatalf("the refusal changed the file: %q", got)
		}
		if err := Weaken(ctx, &hosts.Inventory{DrillEnvironment: true}, r, "everysec", "no-delay", "no-persistence"); err != nil {
			t.Fatal(err)
		}
		if got := run(t, r, "cat /etc/redis/redlock.conf"); got != "appendonly no\nappendfsync everysec\n" {
			t.Errorf("weakened conf %q", got)
		}
		if out := run(t, r, "systemctl show -p Environment --value redlock-redis"); !strings.Contains(out, "REDIS_GUARD_DELAY=0") {
			t.Errorf("unit environment %q, want REDIS_GUARD_DELAY=0", out)
		}
		// Weakening twice keeps the production backup.
		if err := Weaken(ctx, &hosts.Inventory{DrillEnvironment: true}, r, "everysec"); err != nil {
			t.Fatal(err)
		}
		if err := Restore(ctx, r); err != nil {
			t.Fatal(err)
		}
		if got := run(t, r, "cat /etc/redis/redlock.conf"); got != prod {
			t.Errorf("restored conf %q, want %q", got, prod)
		}
		if out := run(t, r, "systemctl show -p Environment --value redlock-redis"); strings.Contains(out, "REDIS_GUARD_DELAY") {
			t.Errorf("after restore the environment is %q", out)
		}
		waitFor(t, r, "redis back", "systemctl is-active redlock-redis", "\nactive\n")
	})

	t.Run("clock-jump is refused on a machine, and its helper refuses there too", func(t *testing.T) {
		// A machine's clock is the host's: nothing here may step it, so the
		// helper only ever runs with 0 (check only).
		if _, err := Inject(ctx, r, Fault{Kind: "clock-jump", Host: h}, fault.Params{"by": {D: 15 * time.Second}}, Options{}); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "shares its host's clock") {
			t.Fatalf("got %v, want the machine refusal", err)
		}
		_, err := r.Run(ctx, "mkdir -p /run/redlab && cat > /run/redlab/clock-step <<'EOF'\n"+clockStepHelper+"EOF\npython3 /run/redlab/clock-step 0")
		var xe *machine.ExitError
		if !errors.As(err, &xe) || !strings.Contains(xe.Stderr, "it is a container (/run/systemd/container exists)") {
			t.Fatalf("helper in a machine: got %v, want its refusal", err)
		}
	})
}

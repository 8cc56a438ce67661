package lab

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/faultcheck"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

func TestMachineAddresses(t *testing.T) {
	for _, c := range []struct {
		port      int
		addr, ntp string
	}{
		{7101, "127.80.27.189", "127.81.27.189"},
		{9102, "127.80.35.142", "127.81.35.142"}, // infra/envs/local's tftest
		{65535, "127.80.255.255", "127.81.255.255"},
	} {
		addr, ntp := machineAddresses(c.port)
		if addr != c.addr || ntp != c.ntp {
			t.Errorf("port %d: got %s and %s, want %s and %s", c.port, addr, ntp, c.addr, c.ntp)
		}
	}
}

// TestLabMachines brings up a lab of three machines (systemd-nspawn, the
// module's user data under real systemd) and checks the faults against the
// machine's own record, its journal: kill -9 restarts only after the
// restart delay (the guard saw an unclean stop), a restart starts at once
// (a clean stop), a power loss waits again (the boot) and keeps what the
// machine's redis-server fsynced on its power-loss filesystem (everysec:
// what came before its last fsync; always: every acknowledged write);
// faults a machine cannot model are
// refused before anything is recorded; down leaves no process, mount,
// file or port behind.
func TestLabMachines(t *testing.T) {
	redlab, tf := testenv.RequireLab(t, FindTerraform)
	if err := node.CheckMachineHost(); err != nil {
		testenv.Missing(t, err.Error())
	}
	const n = 3
	const delay = 3 * time.Second
	dir := filepath.Join(t.TempDir(), "lab")
	base := freeBasePort(t, n)
	cfg := Config{Profile: profile.Profile{Nodes: n, RestartDelay: delay, Machines: true, Persistence: []Persistence{PersistAlways, PersistAlways, PersistEverysec}, PowerLoss: true},
		StateDir: dir, BasePort: base,

		Redlab: redlab, Terraform: tf, InfraDir: filepath.Join(testenv.RepoRoot(t), "infra"),
	}
	ctx := context.Background()
	downed := false
	t.Cleanup(func() {
		if downed {
			return
		}
		if err := Down(context.Background(), cfg); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	started := time.Now()
	l, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lab of %d machines up in %v", n, time.Since(started).Round(time.Millisecond))
	if again, err := Open(dir); err != nil || !again.Machines() {
		t.Fatalf("Open: machines %v (%v), want true from the state file", again != nil && again.Machines(), err)
	}
	for _, node := range l.Nodes() {
		addr, _ := machineAddresses(base + node.ID)
		if want := net.JoinHostPort(addr, strconv.Itoa(base+redisPortOffset+node.ID)); node.RedisAddr != want {
			t.Errorf("node %d: redis at %s, want the machine's %s", node.ID, node.RedisAddr, want)
		}
		if err := faultcheck.Ping(t, l, node.ID, time.Second); err != nil {
			t.Errorf("node %d through its front: %v", node.ID, err)
		}
		j := machineJournal(t, l, node.ID)
		if !strings.Contains(j, "restart-guard: holding Redis back for 3s: first start since boot") {
			t.Errorf("node %d: the first boot's journal has no guard wait:\n%s", node.ID, j)
		}
	}

	t.Run("kill -9 restarts only after the delay", func(t *testing.T) {
		faultcheck.Kill(t, l, 1, delay, true)
		if j := machineJournal(t, l, 1); !strings.Contains(j, "restart-guard: holding Redis back for 3s: last stop was 'unclean'") {
			t.Errorf("journal after kill -9: want the guard's wait for an unclean stop:\n%s", j)
		}
	})

	t.Run("restart starts at once", func(t *testing.T) {
		before := faultcheck.Status(t, l, 2)
		faultcheck.RestartOverride(t, l, 2)
		if after := faultcheck.Status(t, l, 2); after.Restarts != before.Restarts {
			t.Errorf("restart counted as a crash: restarts %d, want %d", after.Restarts, before.Restarts)
		}
		j := machineJournal(t, l, 2)
		if !strings.Contains(j, "restart-guard: last stop was clean: starting Redis now") || strings.Count(j, "holding Redis back") != 1 {
			t.Errorf("journal after systemctl restart: want one wait (the boot's), then a start without waiting:\n%s", j)
		}
		if _, err := l.Restart(ctx, 2, time.Second); !errors.Is(err, ErrUnsupported) {
			t.Errorf("restart with a delay: got %v, want %v", err, ErrUnsupported)
		}
	})

	t.Run("unsupported faults change nothing", func(t *testing.T) {
		before, err := l.Faults()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.ClockJump(ctx, 1, time.Second); !errors.Is(err, ErrUnsupported) {
			t.Errorf("clock-jump: got %v, want %v", err, ErrUnsupported)
		}
		if _, err := l.ClockRate(ctx, 1, 2, time.Second); !errors.Is(err, ErrUnsupported) {
			t.Errorf("clock-rate: got %v, want %v", err, ErrUnsupported)
		}
		after, err := l.Faults()
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != len(before) {
			t.Errorf("refused faults were recorded: %d faults, then %d", len(before), len(after))
		}
	})

	t.Run("a power loss waits again and keeps what was fsynced", func(t *testing.T) {
		faultcheck.PowerLoss(t, l, 3, PersistEverysec)
		faultcheck.PowerLoss(t, l, 1, PersistAlways)
		faults, err := l.Faults()
		if err != nil {
			t.Fatal(err)
		}
		var last *Fault
		for i := range faults {
			if faults[i].Node == 3 && faults[i].Kind == fault.PowerLoss {
				last = &faults[i]
			}
		}
		if last == nil {
			t.Fatal("no power-loss fault recorded for node 3")
		}
		// The node was seen not answering until at least the boot plus the
		// guard's wait.
		if down := last.End.Sub(last.Start); down < delay {
			t.Errorf("power loss: the node answered %v after the cut, want at least the restart delay %v", down, delay)
		}
		if j := machineJournal(t, l, 3); !strings.Contains(j, "restart-guard: holding Redis back for 3s: first start since boot") {
			t.Errorf("journal of the boot after the power loss: want the guard's first-boot wait:\n%s", j)
		}
	})

	t.Run("pause and partition", func(t *testing.T) {
		faultcheck.Pause(t, l, 1, time.Second)
		faultcheck.Partition(t, l, 2)
	})

	if err := Down(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	downed = true
	if left := leftovers(dir); len(left) > 0 {
		t.Errorf("processes left after down: %v", left)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), dir) {
		t.Errorf("mounts left under %s after down", dir)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir after down: %v, want gone", err)
	}
	if !portsFree(base, n) {
		t.Errorf("ports of base %d still taken after down", base)
	}
	for id := 1; id <= n; id++ {
		addr, ntp := machineAddresses(base + id)
		if c, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(base+redisPortOffset+id))); err != nil {
			t.Errorf("node %d's machine address after down: %v", id, err)
		} else {
			c.Close()
		}
		if c, err := net.ListenPacket("udp", net.JoinHostPort(ntp, "123")); err != nil {
			t.Errorf("node %d's NTP address after down: %v", id, err)
		} else {
			c.Close()
		}
	}
}

// machineJournal returns redlock-redis.service's journal of the current
// boot of node id's machine, read inside it: its systemd is the parent of
// the node's redis-server.
func machineJournal(t *testing.T, l *Lab, id int) string {
	t.Helper()
	pid := faultcheck.Status(t, l, id).RedisPID
	if pid == 0 {
		t.Fatalf("node %d runs no redis-server", id)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var leader string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			leader = strings.TrimSpace(v)
		}
	}
	out, err := exec.Command("nsenter", "--target", leader, "--all", "--root", "--wd", "--",
		"journalctl", "--no-pager", "-o", "cat", "-b", "-u", "redlock-redis.service").CombinedOutput()
	if err != nil {
		t.Fatalf("journal of node %d: %v\n%s", id, err, out)
	}
	return string(out)
}

// TestUpRefusesMachinesWithoutTheirPrograms: with none of the programs a
// machine needs on PATH, Up with Machines fails with node.ErrMachineHost, naming
// them, before it creates anything.
func TestUpRefusesMachinesWithoutTheirPrograms(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := node.CheckMachineHost()
	if !errors.Is(err, node.ErrMachineHost) {
		t.Fatalf("node.CheckMachineHost with an empty PATH: got %v, want %v", err, node.ErrMachineHost)
	}
	for _, prog := range []string{"systemd-nspawn", "nsenter", "chronyd", "debootstrap"} {
		if !strings.Contains(err.Error(), prog) {
			t.Errorf("node.CheckMachineHost: %q does not name %s", err, prog)
		}
	}
	dir := filepath.Join(t.TempDir(), "lab")
	_, err = Up(context.Background(), Config{Profile: profile.Profile{Machines: true},
		StateDir: dir, Redlab: "/bin/true", RedisServer: "/bin/true",
		Terraform: "/bin/true", InfraDir: filepath.Join(testenv.RepoRoot(t), "infra"),
	})
	if !errors.Is(err, node.ErrMachineHost) {
		t.Fatalf("Up with machines: got %v, want %v", err, node.ErrMachineHost)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir after a refused up: %v, want not created", err)
	}
	if _, err := Up(context.Background(), Config{Profile: profile.Profile{Machines: true, Replicas: 1}, StateDir: dir}); err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Errorf("Up with machines and replicas: got %v, want refused", err)
	}
}

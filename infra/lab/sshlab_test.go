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
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/infra/hostfault"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/infra/remote"
	"github.com/redlocklab/redlocklab/internal/faultcheck"
	"github.com/redlocklab/redlocklab/internal/proc"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

func TestMachineNetAddresses(t *testing.T) {
	for _, c := range []struct {
		port       int
		addr, host string
	}{
		{7101, "10.27.189.2", "10.27.189.1"},
		{12601, "10.49.57.2", "10.49.57.1"},
		{65535, "10.255.255.2", "10.255.255.1"},
	} {
		addr, host := machineNetAddresses(c.port)
		if addr != c.addr || host != c.host {
			t.Errorf("port %d: got %s and %s, want %s and %s", c.port, addr, host, c.addr, c.host)
		}
		if got, want := machineNetns(c.port), "redlab-"+strconv.Itoa(c.port); got != want {
			t.Errorf("port %d: namespace %s, want %s", c.port, got, want)
		}
	}
	if _, err := (Config{Profile: profile.Profile{SSH: true}, StateDir: "/tmp/x"}).withDefaults(); err == nil || !strings.Contains(err.Error(), "it needs machines") {
		t.Errorf("ssh without machines: got %v, want refused", err)
	}
}

// TestLabMachinesSSH brings up three machines with SSH: each in a network
// namespace of its own, reached over SSH with the lab's key and known host
// keys through the inventory the lab wrote; a partition over SSH silences
// the node's Redis and heals; a clock jump is refused; then a supervisor is
// killed with SIGKILL and down still leaves no machine, namespace, veth,
// process, mount or file.
func TestLabMachinesSSH(t *testing.T) {
	redlab, tf := testenv.RequireLab(t, FindTerraform)
	if err := node.CheckMachineHost(); err != nil {
		testenv.Missing(t, err.Error())
	}
	const n = 3
	dir := filepath.Join(t.TempDir(), "lab")
	base := freeBasePort(t, n)
	cfg := Config{Profile: profile.Profile{Nodes: n, RestartDelay: 2 * time.Second, Machines: true, SSH: true},
		StateDir: dir, BasePort: base,
		Redlab: redlab, Terraform: tf, InfraDir: filepath.Join(testenv.RepoRoot(t), "infra"),
	}
	ctx := context.Background()
	downed := false
	t.Cleanup(func() {
		if !downed {
			if err := Down(context.Background(), cfg); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	started := time.Now()
	l, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lab of %d machines with SSH up in %v", n, time.Since(started).Round(time.Millisecond))
	if again, err := Open(dir); err != nil || !again.SSH() || again.Config().SSH != true {
		t.Fatalf("Open: ssh not kept in lab.json (%v)", err)
	}
	inv, err := hosts.Load(l.HostsFile())
	if err != nil {
		t.Fatal(err)
	}
	if !inv.DrillEnvironment || len(inv.Hosts) != n {
		t.Fatalf("inventory: drill environment %v, %d hosts; want true, %d", inv.DrillEnvironment, len(inv.Hosts), n)
	}
	creds, err := l.Credentials()
	if err != nil {
		t.Fatal(err)
	}
	clients := make([]*remote.Client, n)
	for i, h := range inv.Hosts {
		addr, hostAddr := machineNetAddresses(base + i + 1)
		if h.Address != addr || h.Type != hosts.Machine || !h.OwnNetns || h.Redis != l.Nodes()[i].RedisAddr {
			t.Errorf("host %d: %+v, want address %s, type machine, own_netns, redis %s", i+1, h, addr, l.Nodes()[i].RedisAddr)
		}
		if err := faultcheck.Ping(t, l, i+1, time.Second); err != nil {
			t.Errorf("node %d through its front: %v", i+1, err)
		}
		// Host keys are checked: the lab's known_hosts, no insecure mode.
		c, err := remote.Dial(ctx, h, remote.Config{KnownHosts: inv.KnownHosts})
		if err != nil {
			t.Fatalf("host %d over SSH: %v", i+1, err)
		}
		t.Cleanup(func() { c.Close() })
		clients[i] = c
		out, err := c.Run(ctx, "ip -o -4 addr show scope global; echo routes; ip route; echo ntp; chronyc -n sources")
		if err != nil {
			t.Fatalf("host %d: %v\n%s", i+1, err, out)
		}
		if !strings.Contains(out, " "+addr+"/30 ") || strings.Contains(out, "default") {
			t.Errorf("host %d's network: want %s/30 and no default route:\n%s", i+1, addr, out)
		}
		if !strings.Contains(out, hostAddr) {
			t.Errorf("host %d's chrony: want its source %s (the host's end of the veth):\n%s", i+1, hostAddr, out)
		}
	}

	t.Run("partition over SSH silences the node and heals", func(t *testing.T) {
		h := inv.Hosts[1]
		f, err := hostfault.Inject(ctx, clients[1], hostfault.Fault{Kind: "partition", Host: h}, fault.Params{fault.For: {D: time.Minute}}, hostfault.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rc := redis.NewClient(&redis.Options{Addr: h.Redis, Username: creds.Redlock.Name, Password: creds.Redlock.Password,
			DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
		defer rc.Close()
		if err := rc.Ping(ctx).Err(); err == nil {
			t.Errorf("PING %s during the partition answered, want silence", h.Redis)
		} else if !errors.Is(err, os.ErrDeadlineExceeded) && !strings.Contains(err.Error(), "timeout") {
			t.Errorf("PING %s during the partition: %v, want a timeout (DROP, not REJECT)", h.Redis, err)
		}
		// The other machines are untouched: their namespaces are their own.
		if err := faultcheck.Ping(t, l, 1, time.Second); err != nil {
			t.Errorf("node 1 during node 2's partition: %v", err)
		}
		if err := hostfault.Heal(ctx, clients[1], f); err != nil {
			t.Fatal(err)
		}
		if err := rc.Ping(ctx).Err(); err != nil {
			t.Errorf("PING %s after the heal: %v", h.Redis, err)
		}
	})

	t.Run("latency over SSH needs the host kernel's netem", func(t *testing.T) {
		h := inv.Hosts[0]
		f, err := hostfault.Inject(ctx, clients[0], hostfault.Fault{Kind: "latency", Host: h}, fault.Params{"add": {D: 50 * time.Millisecond}}, hostfault.Options{})
		if err != nil {
			if !netemAvailable(t) {
				t.Logf("LOUD: this host's kernel has no netem qdisc (sch_netem, CONFIG_NET_SCH_NETEM), so latency over SSH cannot be injected here; the injection failed as it should: %v", err)
				return
			}
			t.Fatal(err)
		}
		out, _ := clients[0].Run(ctx, "tc qdisc show dev eth0")
		if !strings.Contains(out, "netem") {
			t.Errorf("qdiscs inside the machine: %q, want netem on eth0", out)
		}
		if err := hostfault.Heal(ctx, clients[0], f); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("clock jump is refused with its message", func(t *testing.T) {
		_, err := hostfault.Inject(ctx, clients[2], hostfault.Fault{Kind: "clock-jump", Host: inv.Hosts[2]}, fault.Params{"by": {D: time.Second}}, hostfault.Options{})
		var refused *hostfault.RefusedError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), "shares its host's clock") {
			t.Errorf("clock-jump on a machine: got %v, want refused: shares its host's clock", err)
		}
	})

	t.Run("a controller SIGKILLed mid-fault leaves nothing once the dead-man fires", func(t *testing.T) {
		// `redlab fault` over SSH, killed right after it injected: a
		// partition of node 2 it would have healed after --hold 2s, and a
		// pause of node 1 for 2s. Nobody heals them but the hosts
		// themselves: the switch fires at the fault's for plus its margin
		// (30s), the pause ends by itself after its for.
		type run struct {
			node int
			args []string
		}
		var cmds []*exec.Cmd
		for _, r := range []run{{2, []string{"partition", "2", "--hold", "2s"}}, {1, []string{"pause", "1", "--for", "2s"}}} {
			cmd := exec.Command(redlab, append(append([]string{"fault"}, r.args...), "--hosts", l.HostsFile())...)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4096)
			var got strings.Builder
			for !strings.Contains(got.String(), "injected") {
				n, err := out.Read(buf)
				got.Write(buf[:n])
				if err != nil {
					t.Fatalf("redlab fault %v: %v before it injected: %s", r.args, err, got.String())
				}
			}
			_ = cmd.Process.Kill() // SIGKILL: no signal handler heals anything
			cmds = append(cmds, cmd)
		}
		for _, cmd := range cmds {
			_ = cmd.Wait()
		}
		rc := redis.NewClient(&redis.Options{Addr: inv.Hosts[1].Redis, Username: creds.Redlock.Name, Password: creds.Redlock.Password,
			DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
		defer rc.Close()
		if err := rc.Ping(ctx).Err(); err == nil {
			t.Errorf("node 2 answered right after its controller died, want the partition still in place")
		}
		faultcheck.Eventually(t, 90*time.Second, "nothing left of either fault on the hosts", func() error {
			for _, i := range []int{0, 1} {
				out, err := clients[i].Run(ctx, "systemctl list-units --all --plain --no-legend 'redlab-heal-*'; ls "+hostfault.StateDir+" 2>/dev/null; iptables -S | grep -i redlab; grep '^State:' /proc/$(systemctl show -p MainPID --value redlock-redis)/status")
				if err != nil && !strings.Contains(out, "State:") {
					return fmt.Errorf("host %d: %v: %s", i+1, err, out)
				}
				if strings.TrimSpace(out) != "State:\tS (sleeping)" && !strings.HasPrefix(strings.TrimSpace(out), "State:\tR") {
					return fmt.Errorf("host %d still has: %q", i+1, out)
				}
			}
			return rc.Ping(ctx).Err()
		})
	})

	for _, c := range clients {
		c.Close()
	}
	// A supervisor that dies without cleaning up: down must still find its
	// namespace.
	sup := proc.Scan(func(pid int) bool {
		return strings.Contains(strings.Join(proc.Cmdline(pid), " "), "node run --id 3 --state-dir "+dir)
	})
	if len(sup) != 1 {
		t.Fatalf("supervisor of node 3: found %v", sup)
	}
	_ = syscall.Kill(sup[0], syscall.SIGKILL)
	proc.WaitGone(ctx, sup[0], 10*time.Second)

	if err := Down(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	downed = true
	checkMachinesGone(t, dir, base, n)
}

// checkMachinesGone fails for anything a lab of n machines with SSH left:
// a process, a mount, the state directory, a network namespace, a veth,
// an address of a veth pair, or an iptables rule on this host.
func checkMachinesGone(t *testing.T, dir string, base, n int) {
	t.Helper()
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
	for id := 1; id <= n; id++ {
		ns := machineNetns(base + id)
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err == nil {
			t.Errorf("node %d: network namespace %s left after down", id, ns)
		}
		if _, err := net.InterfaceByName(ns); err == nil {
			t.Errorf("node %d: veth %s left after down", id, ns)
		}
		_, hostAddr := machineNetAddresses(base + id)
		if c, err := net.ListenPacket("udp", net.JoinHostPort(hostAddr, "123")); err == nil {
			c.Close()
			t.Errorf("node %d: address %s still on this host after down", id, hostAddr)
		}
		for _, pid := range proc.Scan(func(pid int) bool {
			cmd := strings.Join(proc.Cmdline(pid), " ")
			return strings.Contains(cmd, "redlab-"+strconv.Itoa(base+id))
		}) {
			t.Errorf("node %d: process %d %q left after down", id, pid, proc.Cmdline(pid))
		}
	}
	// Faults over SSH add rules inside the machines' namespaces only; the
	// host's tables must hold none of redlab's.
	for _, save := range []string{"iptables-save", "iptables-legacy-save", "iptables-nft-save"} {
		if _, err := exec.LookPath(save); err != nil {
			continue
		}
		out, err := exec.Command(save).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", save, err, out)
		}
		if strings.Contains(string(out), "redlab-") {
			t.Errorf("%s after down lists redlab's rules:\n%s", save, out)
		}
	}
}

// netemAvailable reports whether this kernel has the netem qdisc, tried in
// a network namespace of the test's own.
func netemAvailable(t *testing.T) bool {
	t.Helper()
	ns := "redlab-netem-" + strconv.Itoa(os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	_ = exec.Command("ip", "-n", ns, "link", "set", "lo", "up").Run()
	return exec.Command("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms").Run() == nil
}

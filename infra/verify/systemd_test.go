package verify

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/machine"
	labnode "github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/flock"
	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/redlock"
)

// The machines of TestNodeUnderSystemd share the host's network: each binds
// its own loopback address, and so do the NTP servers it may reach.
const (
	syncedAddr   = "127.0.79.1"
	unsyncedAddr = "127.0.79.2"
	ntpAddr      = "127.0.79.123" // serves the synced node from the start
	lateNTPAddr  = "127.0.79.124" // appears only once the unsynced node was seen waiting
	systemdPort  = 6379
	// The rendered restart delay: max_lock_ttl 3 s * (1 + 0.01) + margin 1 s.
	systemdDelay = 4030 * time.Millisecond
)

// TestNodeUnderSystemd boots the user data infra/modules/redis-node renders
// for a VM in Debian 12 machines (systemd-nspawn, cloud-init's NoCloud seed,
// gzipped as modules/aws sends it) and drives the real units: the node serves
// locks as the redlock user once ready (Type=notify); a kill -9 of
// redis-server restarts only after the restart delay, a systemctl restart at
// once, a power cut waits again; chrony unable to synchronise keeps Redis
// down. The first run on a host builds the Debian image (see
// infra/machine), later runs reuse it.
func TestNodeUnderSystemd(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "booting machines needs root (debootstrap, overlay mounts, systemd-nspawn)")
	}
	for _, prog := range []string{"debootstrap", "systemd-nspawn", "nsenter", "chronyd"} {
		requireProgram(t, prog)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)

	// One such test per host at a time: the addresses are fixed, and two
	// sets of booting machines on two cores would only slow each other.
	unlock, err := flock.Lock(ctx, filepath.Join(os.TempDir(), "redlock-lab-node-systemd.lock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)

	img, err := machine.EnsureImage(ctx, machine.ImageConfig{Log: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	common := map[string]any{
		"port":             systemdPort,
		"max_lock_ttl":     3,
		"restart_margin":   1,
		"redlock_password": testRedlockPassword,
		"monitor_password": testMonitorPassword,
	}
	with := func(extra map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range common {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	rendered := render(t, map[string]map[string]any{
		// As modules/aws renders it, with the Amazon Time Sync Service's
		// poll interval.
		"synced": with(map[string]any{"bind_address": syncedAddr, "ntp_servers": []string{ntpAddr}, "ntp_poll_exponent": 4}),
		// Polls every 2 s, so that it notices the server soon after it appears.
		"unsynced": with(map[string]any{"bind_address": unsyncedAddr, "ntp_servers": []string{lateNTPAddr}, "ntp_poll_exponent": 1}),
	})
	for name, n := range rendered {
		if got := time.Duration(n.RestartDelaySeconds * float64(time.Second)); got != systemdDelay {
			t.Fatalf("%s: restart_delay_seconds = %v, want %v", name, got, systemdDelay)
		}
	}
	startNTPServer(t, ntpAddr)

	synced := bootNode(ctx, t, img, "redlock-synced", syncedAddr, rendered["synced"])
	unsynced := bootNode(ctx, t, img, "redlock-unsynced", unsyncedAddr, rendered["unsynced"])

	t.Run("chrony unable to synchronise keeps Redis down", func(t *testing.T) {
		n := unsynced
		// Up to the first ExecStartPre, chronyc waitsync, and no further.
		waitFor(ctx, t, "the unit waits in chronyc waitsync", func() (bool, string) {
			state, sub, ctl := n.unitState(ctx, t)
			return state == "activating" && sub == "start-pre" && ctl == "chronyc", fmt.Sprintf("%s/%s, control process %q", state, sub, ctl)
		})
		// Long enough for the guard's wait and Redis's start, had the unit
		// gone past the clock.
		time.Sleep(systemdDelay + 2*time.Second)
		if state, sub, ctl := n.unitState(ctx, t); state != "activating" || ctl != "chronyc" {
			t.Fatalf("unit: %s/%s, control process %q; want still activating in chronyc waitsync", state, sub, ctl)
		}
		if c, err := net.DialTimeout("tcp", n.addr, time.Second); err == nil {
			c.Close()
			t.Fatalf("%s accepts connections while the clock is not synchronised", n.addr)
		}
		if strings.Contains(n.journal(ctx, t, ""), "restart-guard:") {
			t.Fatalf("the restart guard ran before the clock was synchronised:\n%s", n.journal(ctx, t, ""))
		}

		synchronised := time.Now()
		startNTPServer(t, lateNTPAddr)
		ready := n.waitReady(ctx, t)
		if waited := ready.Sub(synchronised); waited < systemdDelay {
			t.Errorf("Redis served %v after a time source appeared, want at least the restart delay %v: the delay must run on a synchronised clock", waited, systemdDelay)
		}
		j := n.journal(ctx, t, "")
		sync := strings.Index(j, "correction:")
		guard := strings.Index(j, "restart-guard: holding Redis back for 4.03s: first start since boot")
		if sync < 0 || guard < 0 || guard < sync {
			t.Errorf("journal: want chronyc waitsync's tries, then the guard's first-boot wait:\n%s", j)
		}
	})
	// The unsynced machine's chronyd may hold the shared 127.0.0.1:323
	// (chronyc's UDP port): gone, it cannot answer for the other machine.
	if err := unsynced.m.Close(); err != nil {
		t.Errorf("close %s: %v", unsynced.m.Name(), err)
	}

	n := synced
	if !t.Run("ready, serving locks as the redlock user", func(t *testing.T) {
		n.waitReady(ctx, t)
		props := n.show(ctx, t, "Type", "ActiveState", "StatusText", "NRestarts")
		if props["Type"] != "notify" || props["ActiveState"] != "active" || props["StatusText"] != "Ready to accept connections" {
			t.Errorf("unit: %v, want Type=notify, active, and Redis's READY status", props)
		}
		j := n.journal(ctx, t, "")
		if !strings.Contains(j, "restart-guard: holding Redis back for 4.03s: first start since boot") {
			t.Errorf("first boot: want the guard's wait in the journal:\n%s", j)
		}
		// The default user is off: without a password there is nothing to do.
		if err := redisWithoutAuth(ctx, n.addr); err == nil {
			t.Error("the default user can PING: want NOAUTH")
		}
	}) {
		return
	}

	t.Run("tmpfiles and the hardening leave the guard its directories", func(t *testing.T) {
		for _, dir := range []string{"/var/lib/redis", "/var/lib/redis-guard", "/run/redis-guard"} {
			if got := strings.TrimSpace(n.exec(ctx, t, "stat", "-c", "%U:%G %a", dir)); got != "redis:redis 750" {
				t.Errorf("%s: got %q, want redis:redis 750 (tmpfiles)", dir, got)
			}
		}
		if got := strings.TrimSpace(n.exec(ctx, t, "stat", "-c", "%U %s", "/var/lib/redis-guard/last-stop")); got != "redis 8" {
			t.Errorf("guard state file: got %q, want redis's, holding \"running\\n\"", got)
		}
		if got := strings.TrimSpace(n.exec(ctx, t, "cat", "/var/lib/redis-guard/last-stop")); got != "running" {
			t.Errorf("guard state: got %q, want running", got)
		}
		if got := strings.TrimSpace(n.exec(ctx, t, "cat", "/etc/sysctl.d/60-redlock-redis.conf")); !strings.HasSuffix(got, "vm.overcommit_memory = 1") {
			t.Errorf("sysctl.d: got %q, want vm.overcommit_memory = 1", got)
		}
		props := n.show(ctx, t, "IPAddressDeny", "IPAddressAllow", "ProtectProc", "RemoveIPC", "OOMScoreAdjust", "RequiresMountsFor")
		want := map[string]string{"ProtectProc": "invisible", "RemoveIPC": "yes", "OOMScoreAdjust": "-900"}
		for k, v := range want {
			if props[k] != v {
				t.Errorf("%s: got %q, want %q", k, props[k], v)
			}
		}
		// PrivateTmp= adds /var/tmp.
		if mounts := strings.Fields(props["RequiresMountsFor"]); !slices.Contains(mounts, "/var/lib/redis") {
			t.Errorf("RequiresMountsFor: got %q, want /var/lib/redis among them", props["RequiresMountsFor"])
		}
		if !strings.Contains(props["IPAddressDeny"], "0.0.0.0/0") || !strings.Contains(props["IPAddressAllow"], "127.0.0.0/8") {
			t.Errorf("IP firewall: deny %q, allow %q; want everything denied but localhost and client_cidrs", props["IPAddressDeny"], props["IPAddressAllow"])
		}
		// In redis-server's mount namespace only the listed programs run.
		pid := n.hostPID(ctx, t)
		for prog, allowed := range map[string]bool{"/usr/bin/sleep": true, "/usr/bin/id": false, "/usr/bin/redis-check-aof": false} {
			out, err := exec.CommandContext(ctx, "nsenter", "--target", strconv.Itoa(pid), "--mount", "--", prog, "--version").CombinedOutput()
			if ran := err == nil; ran != allowed {
				t.Errorf("exec %s inside redis-server's sandbox: ran = %v, want %v (%v: %s)", prog, ran, allowed, err, out)
			}
		}
	})

	t.Run("kill -9 restarts only after the delay", func(t *testing.T) {
		held := n.hold(ctx, t, "lock:kill")
		cursor := n.cursor(ctx, t)
		pid := n.mainPID(ctx, t)
		killed := time.Now()
		n.exec(ctx, t, "kill", "-9", strconv.Itoa(pid))
		ready := n.waitReady(ctx, t)
		if waited := ready.Sub(killed); waited < systemdDelay {
			t.Errorf("Redis served again %v after kill -9, want at least the restart delay %v", waited, systemdDelay)
		}
		j := n.journal(ctx, t, cursor)
		if !strings.Contains(j, "restart-guard: holding Redis back for 4.03s: last stop was 'unclean'") {
			t.Errorf("journal after kill -9: want the guard's wait for an unclean stop:\n%s", j)
		}
		n.stillHeld(ctx, t, held)
	})

	t.Run("systemctl restart starts at once", func(t *testing.T) {
		held := n.hold(ctx, t, "lock:restart")
		cursor := n.cursor(ctx, t)
		n.exec(ctx, t, "systemctl", "restart", unitName)
		n.waitReady(ctx, t)
		j := n.journal(ctx, t, cursor)
		if !strings.Contains(j, "restart-guard: last stop was clean: starting Redis now") || strings.Contains(j, "holding Redis back") {
			t.Errorf("journal after systemctl restart: want a start without waiting:\n%s", j)
		}
		n.stillHeld(ctx, t, held)
	})

	t.Run("a chronyd restarted after Redis ran may not step the clock", func(t *testing.T) {
		before := n.chronydArgs(ctx, t)
		if strings.Contains(before, " -R") {
			t.Errorf("chronyd started at boot with %q: want makestep allowed (no -R)", before)
		}
		n.exec(ctx, t, "systemctl", "restart", "chrony.service")
		after := n.chronydArgs(ctx, t)
		if !strings.HasSuffix(after, " -R") {
			t.Errorf("chronyd restarted after Redis ran: %q, want -R", after)
		}
		if state, _, _ := n.unitState(ctx, t); state != "active" {
			t.Errorf("restarting chrony took Redis to %s: want it untouched", state)
		}
	})

	t.Run("a power cut waits again", func(t *testing.T) {
		held := n.hold(ctx, t, "lock:power")
		if err := n.m.PowerCut(ctx); err != nil {
			t.Fatal(err)
		}
		booted := time.Now()
		if err := n.m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		ready := n.waitReady(ctx, t)
		if waited := ready.Sub(booted); waited < systemdDelay {
			t.Errorf("Redis served %v after the boot, want at least the restart delay %v", waited, systemdDelay)
		}
		j := n.journal(ctx, t, "")
		if !strings.Contains(j, "restart-guard: holding Redis back for 4.03s: first start since boot") {
			t.Errorf("journal of the boot after the power cut: want the guard's first-boot wait:\n%s", j)
		}
		if got := strings.TrimSpace(n.exec(ctx, t, "stat", "-c", "%U:%G %a", "/run/redis-guard")); got != "redis:redis 750" {
			t.Errorf("/run/redis-guard after the boot: got %q, want redis:redis 750 (tmpfiles)", got)
		}
		// The append-only file kept the lock through the power cut.
		n.stillHeld(ctx, t, held)
	})
}

const unitName = "redlock-redis.service"

// systemdNode is one booted machine running the rendered node.
type systemdNode struct {
	m      *machine.Machine
	addr   string
	client *redlock.Client
	other  *redlock.Client // a second lock client, to check who holds a key
}

// bootNode boots a machine with the node's user data, gzipped as
// modules/aws hands it to EC2 (cloud-init decompresses it).
func bootNode(ctx context.Context, t *testing.T, img machine.Image, name, addr string, n node) *systemdNode {
	t.Helper()
	var ud bytes.Buffer
	zw := gzip.NewWriter(&ud)
	if _, err := zw.Write([]byte(n.CloudInit)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := machine.New(machine.Config{Name: name, Image: img, Dir: t.TempDir(), UserData: ud.Bytes()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s console (%s):\n%s", name, m.Console(), fileTail(m.Console(), 40))
		}
		if err := m.Close(); err != nil {
			t.Errorf("close %s: %v", name, err)
		}
	})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sn := &systemdNode{m: m, addr: net.JoinHostPort(addr, strconv.Itoa(systemdPort))}
	sn.client, sn.other = lockClient(t, sn.addr), lockClient(t, sn.addr)
	t.Cleanup(func() {
		if t.Failed() && m.Leader() != 0 {
			out, _ := m.Exec(context.Background(), "journalctl", "-b", "--no-pager", "-o", "short-monotonic", "-n", "60")
			t.Logf("%s journal:\n%s", name, out)
		}
	})
	return sn
}

func lockClient(t *testing.T, addr string) *redlock.Client {
	t.Helper()
	nodes := redlock.NewNodes([]string{addr}, redlock.WithAuth("redlock", testRedlockPassword), redlock.WithNodeTimeout(500*time.Millisecond))
	c, err := redlock.New(nodes, redlock.WithCircuitBreaker(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		for _, n := range nodes {
			n.Close()
		}
	})
	return c
}

// exec runs a program in the machine and fails the test when it fails.
func (n *systemdNode) exec(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := n.m.Exec(ctx, args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", n.m.Name(), err, out)
	}
	return out
}

// show returns unit properties of redlock-redis.service.
func (n *systemdNode) show(ctx context.Context, t *testing.T, props ...string) map[string]string {
	t.Helper()
	out := n.exec(ctx, t, "systemctl", "show", unitName, "--property="+strings.Join(props, ","))
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	return got
}

// unitState returns the unit's active state, sub-state and the name of its
// control process (an ExecStartPre, while it runs).
func (n *systemdNode) unitState(ctx context.Context, t *testing.T) (state, sub, control string) {
	t.Helper()
	p := n.show(ctx, t, "ActiveState", "SubState", "ControlPID")
	if pid := p["ControlPID"]; pid != "" && pid != "0" {
		out, _ := n.m.Exec(ctx, "cat", "/proc/"+pid+"/comm")
		control = strings.TrimSpace(out)
	}
	return p["ActiveState"], p["SubState"], control
}

// mainPID is redis-server's PID inside the machine.
func (n *systemdNode) mainPID(ctx context.Context, t *testing.T) int {
	t.Helper()
	pid, err := strconv.Atoi(n.show(ctx, t, "MainPID")["MainPID"])
	if err != nil || pid == 0 {
		t.Fatalf("MainPID of %s: %v (%d)", unitName, err, pid)
	}
	return pid
}

// hostPID is redis-server's PID as this host sees it: Redis names its
// process after the address it listens on.
func (n *systemdNode) hostPID(ctx context.Context, t *testing.T) int {
	t.Helper()
	n.mainPID(ctx, t) // running
	var found []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.TrimSpace(string(comm)) == "redis-server" && strings.Contains(string(cmdline), n.addr) {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		t.Fatalf("redis-server processes serving %s on this host: %v, want one", n.addr, found)
	}
	return found[0]
}

// chronydArgs returns the command line of the machine's chronyd, once it runs.
func (n *systemdNode) chronydArgs(ctx context.Context, t *testing.T) string {
	t.Helper()
	var args string
	waitFor(ctx, t, "chronyd runs", func() (bool, string) {
		out, err := n.m.Exec(ctx, "pgrep", "-o", "-a", "chronyd")
		args = strings.TrimSpace(out)
		_, rest, _ := strings.Cut(args, " ")
		args = rest
		return err == nil && args != "", out
	})
	return args
}

// cursor returns the journal's current position.
func (n *systemdNode) cursor(ctx context.Context, t *testing.T) string {
	t.Helper()
	out := n.exec(ctx, t, "journalctl", "--no-pager", "-n", "0", "--show-cursor")
	_, c, ok := strings.Cut(out, "-- cursor: ")
	if !ok {
		t.Fatalf("no cursor in %q", out)
	}
	return strings.TrimSpace(c)
}

// journal returns the unit's messages of this boot, after cursor when it is
// not empty.
func (n *systemdNode) journal(ctx context.Context, t *testing.T, cursor string) string {
	t.Helper()
	args := []string{"journalctl", "--no-pager", "-o", "cat", "-u", unitName, "-b"}
	if cursor != "" {
		args = append(args, "--after-cursor="+cursor)
	}
	return n.exec(ctx, t, args...)
}

// waitReady waits until the node grants a lock to the redlock user, and
// returns when it did.
func (n *systemdNode) waitReady(ctx context.Context, t *testing.T) time.Time {
	t.Helper()
	waitFor(ctx, t, n.addr+" grants a lock", func() (bool, string) {
		l, err := n.client.TryAcquire(ctx, fmt.Sprintf("lock:ready-%d", time.Now().UnixNano()), time.Second)
		if err != nil {
			return false, err.Error()
		}
		_ = l.Release(ctx)
		return true, ""
	})
	return time.Now()
}

// hold takes key for five minutes: far longer than any step of the test,
// even on a slow machine.
func (n *systemdNode) hold(ctx context.Context, t *testing.T, key string) *redlock.Lock {
	t.Helper()
	l, err := n.client.TryAcquire(ctx, key, 5*time.Minute)
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	return l
}

// stillHeld checks that the node still holds l: another client cannot take
// it, and its owner can release it.
func (n *systemdNode) stillHeld(ctx context.Context, t *testing.T, l *redlock.Lock) {
	t.Helper()
	if other, err := n.other.TryAcquire(ctx, l.Key(), time.Second); err == nil {
		_ = other.Release(ctx)
		t.Errorf("%s: another client acquired %s: the node forgot the lock", n.addr, l.Key())
	} else if !errors.Is(err, redlock.ErrContended) {
		t.Errorf("%s: another client's attempt on %s: %v, want %v", n.addr, l.Key(), err, redlock.ErrContended)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("release %s: %v", l.Key(), err)
	}
}

// redisWithoutAuth sends PING without logging in.
func redisWithoutAuth(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 128)
	k, err := c.Read(buf)
	if err != nil {
		return err
	}
	if reply := string(buf[:k]); !strings.HasPrefix(reply, "+PONG") {
		return errors.New(strings.TrimSpace(reply))
	}
	return nil
}

// waitFor polls cond every 100 ms until it holds; the test fails with cond's
// last detail when ctx ends first.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, detail := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting until %s: %v; last: %s", what, ctx.Err(), detail)
		case <-tick.C:
		}
	}
}

// startNTPServer runs chronyd on this host as an NTP server on addr:123,
// the way the lab's machines get theirs (infra/node): -x, it never touches
// the host's clock; it serves the host's time as stratum 8.
func startNTPServer(t *testing.T, addr string) {
	t.Helper()
	ntp, err := labnode.StartNTPServer(context.Background(), addr, "127.0.0.0/8", t.TempDir(), log.New(logWriter{t}, "chronyd "+addr+": ", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ntp.Stop)
}

// logWriter sends the image build's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// fileTail returns the last n lines of a file.
func fileTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

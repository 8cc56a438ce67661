package sshtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/machine"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// machineUserData is a Redis node by the node's unit name, with the unit's
// Restart=always and RestartSec=1, on a loopback TCP port of its own (the
// machines share this host's network).
const machineUserData = `#cloud-config
write_files:
  - path: /etc/systemd/system/redlock-redis.service
    content: |
      [Service]
      ExecStart=/usr/bin/redis-server /etc/redis/redlock.conf
      Restart=always
      RestartSec=1
  - path: /etc/redis/redlock.conf
    content: |
      bind 127.0.0.1
      port %d
      appendonly yes
      appendfsync always
      dir /var/lib/redis
      save ""
runcmd:
  - [mkdir, -p, /var/lib/redis]
  - [systemctl, daemon-reload]
  - [systemctl, start, redlock-redis]
`

// Machine is a booted machine with a Redis node and an sshd of its own.
type Machine struct {
	*Server
	M *machine.Machine
}

// Exec runs a shell script in the machine as root, outside SSH.
func (m *Machine) Exec(ctx context.Context, script string) (string, error) {
	return m.M.Exec(ctx, "/bin/sh", "-c", script)
}

// StartMachine boots machine name with a Redis node on 127.0.0.1:redisPort
// and lends it this host's sshd (both are Debian 12; the image has none),
// run by the machine's own systemd, so that a session has the machine's
// capabilities. The host it returns is of type machine, logging in as root.
func StartMachine(t *testing.T, name string, redisPort int) *Machine {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "booting a machine needs root")
	}
	for _, p := range []string{"systemd-nspawn", "nsenter", "debootstrap"} {
		if _, err := exec.LookPath(p); err != nil {
			testenv.Missing(t, p+" is missing: apt-get install systemd-container util-linux debootstrap")
		}
	}
	for _, f := range []string{sshdPath, "/lib/x86_64-linux-gnu/libwrap.so.0"} {
		if _, err := os.Stat(f); err != nil {
			testenv.Missing(t, f+" is missing: install openssh-server (scripts/setup.sh test does)")
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
	m, err := machine.New(machine.Config{Name: name, Image: img, Dir: dir, UserData: fmt.Appendf(nil, machineUserData, redisPort)})
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
	root := filepath.Join(dir, "root")
	copyInto(t, sshdPath, filepath.Join(root, "usr/local/sbin/redlab-test-sshd"), 0o755)
	copyInto(t, "/lib/x86_64-linux-gnu/libwrap.so.0", filepath.Join(root, "usr/lib/x86_64-linux-gnu/libwrap.so.0"), 0o644)
	srv, conf := Prepare(t, root, "/etc/redlab-test-sshd", FreePort(t), "root")
	mm := &Machine{Server: srv, M: m}
	mm.Host.Type = hosts.Machine
	mm.Host.Name = name
	mm.Host.Redis = "127.0.0.1:" + strconv.Itoa(redisPort)
	for _, script := range []string{
		"id sshd >/dev/null 2>&1 || useradd --system --no-create-home --home-dir /run/sshd --shell /usr/sbin/nologin sshd; mkdir -p /run/sshd",
		"systemd-run --quiet --unit=redlab-test-sshd /usr/local/sbin/redlab-test-sshd -D -e -f " + conf,
	} {
		if out, err := mm.Exec(ctx, script); err != nil {
			t.Fatalf("%s: %v %s", script, err, out)
		}
	}
	if err := WaitListening(srv.Host.SSHAddress(), nil); err != nil {
		j, _ := mm.Exec(ctx, "journalctl --no-pager -u redlab-test-sshd")
		t.Fatalf("the machine's sshd: %v\n%s", err, j)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := mm.Exec(ctx, "systemctl show -p SubState --value redlock-redis")
		if strings.TrimSpace(out) == "running" {
			break
		}
		if time.Now().After(deadline) {
			j, _ := mm.Exec(ctx, "journalctl --no-pager -u redlock-redis")
			t.Fatalf("redis in %s: %q after 60s\n%s", name, out, j)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return mm
}

func copyInto(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
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

package remote_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/redlocklab/redlocklab/infra/remote"
	"github.com/redlocklab/redlocklab/internal/sshtest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

func TestSSHRun(t *testing.T) {
	srv := sshtest.Start(t)
	ctx := context.Background()
	c, err := remote.Dial(ctx, srv.Host, remote.Config{KnownHosts: srv.KnownHosts})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out, err := c.Run(ctx, "id -u\necho \"$((6*7))\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if out != "0\n42\n" {
		t.Errorf("stdout %q, want %q", out, "0\n42\n")
	}
	_, err = c.Run(ctx, "echo on-stderr >&2; exit 3\n")
	var xe *remote.ExitError
	if !errors.As(err, &xe) || xe.Status != 3 || !strings.Contains(xe.Stderr, "on-stderr") {
		t.Errorf("got %v, want an *ExitError with status 3 and the stderr", err)
	}
	// A cancelled context ends the session and stays matchable.
	cctx, cancel := context.WithCancel(ctx)
	go func() { cancel() }()
	if _, err := c.Run(cctx, "sleep 30\n"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v, want context.Canceled", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestSSHHostKeyMismatch(t *testing.T) {
	srv := sshtest.Start(t)
	ctx := context.Background()
	other := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(other, []byte(knownhosts.Line([]string{srv.Host.SSHAddress()}, sshtest.NewHostKey(t))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := remote.Dial(ctx, srv.Host, remote.Config{KnownHosts: other})
	var he *remote.HostKeyError
	if !errors.As(err, &he) || !he.Mismatch || !strings.Contains(err.Error(), "HOST KEY MISMATCH") {
		t.Fatalf("other key: got %v, want a mismatch *HostKeyError", err)
	}

	empty := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = remote.Dial(ctx, srv.Host, remote.Config{KnownHosts: empty})
	if !errors.As(err, &he) || he.Mismatch || !strings.Contains(err.Error(), "host key unknown") {
		t.Fatalf("unknown host: got %v, want an unknown-host *HostKeyError", err)
	}

	// Insecure: it connects, and says so on Warn.
	var warn bytes.Buffer
	c, err := remote.Dial(ctx, srv.Host, remote.Config{KnownHosts: other, InsecureIgnoreHostKey: true, Warn: &warn})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !strings.Contains(warn.String(), "WARNING") || !strings.Contains(warn.String(), srv.Host.SSHAddress()) {
		t.Errorf("warning %q, want one naming the host", warn.String())
	}
}

func TestSSHAuthErrors(t *testing.T) {
	srv := sshtest.Start(t)
	h := srv.Host
	h.Key = ""
	t.Setenv("SSH_AUTH_SOCK", "")
	if _, err := remote.Dial(context.Background(), h, remote.Config{KnownHosts: srv.KnownHosts}); err == nil || !strings.Contains(err.Error(), "SSH_AUTH_SOCK") {
		t.Errorf("no key, no agent: got %v, want an error naming SSH_AUTH_SOCK", err)
	}
	h = srv.Host
	h.User = "nobody"
	if _, err := remote.Dial(context.Background(), h, remote.Config{KnownHosts: srv.KnownHosts}); err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Errorf("a user sshd does not allow: got %v, want an authentication error", err)
	}
}

func TestSSHShell(t *testing.T) {
	for user, want := range map[string]string{"root": "/bin/sh -s", "admin": "sudo -n /bin/sh -s"} {
		if got := remote.Shell(user); got != want {
			t.Errorf("Shell(%q) = %q, want %q", user, got, want)
		}
	}
}

// TestSSHAgent logs in with the key held by a real ssh-agent, the host's
// inventory entry naming no key file.
func TestSSHAgent(t *testing.T) {
	agentBin := testenv.Require(t, "ssh-agent")
	addBin := testenv.Require(t, "ssh-add")
	srv := sshtest.Start(t)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	agentCmd := exec.Command(agentBin, "-D", "-a", sock)
	agentCmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := agentCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agentCmd.Process.Kill()
		_ = agentCmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ssh-agent made no socket in 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	add := exec.Command(addBin, srv.Host.Key)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v\n%s", err, out)
	}
	t.Setenv("SSH_AUTH_SOCK", sock)
	h := srv.Host
	h.Key = ""
	c, err := remote.Dial(context.Background(), h, remote.Config{KnownHosts: srv.KnownHosts})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if out, err := c.Run(context.Background(), "echo agent\n"); err != nil || out != "agent\n" {
		t.Errorf("through the agent: %q, %v", out, err)
	}
}

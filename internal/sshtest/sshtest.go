// Package sshtest starts a real OpenSSH server for tests: on a loopback
// port, with a host key and a client key it generates, logging in as the
// user the tests run as. The server is a child of the test process with
// Pdeathsig, so it ends with the test even when the test binary is killed.
package sshtest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// Server is one running sshd.
type Server struct {
	// Host is the inventory entry that reaches it (type vm, its key file).
	Host hosts.Host
	// KnownHosts is a known_hosts file with the server's key.
	KnownHosts string
	// HostKey is the server's public host key.
	HostKey ssh.PublicKey
	// Dir holds the server's files.
	Dir string
}

const sshdPath = "/usr/sbin/sshd"

// Start runs sshd for the test and stops it at cleanup. Without sshd (or
// not as root, which sshd needs to log users in) the test is Missing.
func Start(t *testing.T) *Server {
	t.Helper()
	if _, err := os.Stat(sshdPath); err != nil {
		testenv.Missing(t, "sshd is missing: install openssh-server (scripts/setup.sh test does)")
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "sshd logs users in only when it runs as root: run the SSH tests as root")
	}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// sshd refuses files that group or others may write, up to /.
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// sshd's privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for range 5 {
		srv, conf := Prepare(t, "", dir, FreePort(t), u.Username)
		var log bytes.Buffer
		cmd := exec.Command(sshdPath, "-D", "-e", "-f", conf)
		cmd.Stderr = &log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		addr := srv.Host.SSHAddress()
		if err := WaitListening(addr, exited); err != nil {
			lastErr = fmt.Errorf("sshd on %s: %v\n%s", addr, err, log.String())
			_ = cmd.Process.Kill()
			continue
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			if t.Failed() {
				t.Logf("sshd log:\n%s", log.String())
			}
		})
		return srv
	}
	t.Fatal(lastErr)
	return nil
}

// Prepare writes an sshd's files for user on 127.0.0.1:port into
// root+dir: a host key, a client key, authorized_keys and sshd_config, whose
// paths name dir as a process chrooted at root sees it (root "" is this
// host; a machine's root file system otherwise). It returns the server as a
// client reaches it, and the config's path as sshd sees it.
func Prepare(t *testing.T, root, dir string, port int, user string) (*Server, string) {
	t.Helper()
	host := filepath.Join(root, dir)
	if err := os.MkdirAll(host, 0o700); err != nil {
		t.Fatal(err)
	}
	hostKey := writeKey(t, filepath.Join(host, "host_key"))
	clientKey := writeKey(t, filepath.Join(host, "client_key"))
	if err := os.WriteFile(filepath.Join(host, "authorized_keys"), ssh.MarshalAuthorizedKey(clientKey), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`ListenAddress 127.0.0.1:%d
HostKey %s
AuthorizedKeysFile %s
PidFile none
UsePAM no
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers %s
LogLevel VERBOSE
`, port, filepath.Join(dir, "host_key"), filepath.Join(dir, "authorized_keys"), user)
	if err := os.WriteFile(filepath.Join(host, "sshd_config"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, []byte(knownhosts.Line([]string{addr}, hostKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &Server{
		Host:       hosts.Host{Address: "127.0.0.1", Port: port, Redis: "127.0.0.1:6379", User: user, Key: filepath.Join(host, "client_key"), Type: hosts.VM},
		KnownHosts: kh,
		HostKey:    hostKey,
		Dir:        host,
	}, filepath.Join(dir, "sshd_config")
}

// writeKey writes a new ed25519 private key in OpenSSH format to path and
// returns its public key.
func writeKey(t *testing.T, path string) ssh.PublicKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// NewHostKey returns a fresh public key, for a known_hosts file that names
// another key than the server's.
func NewHostKey(t *testing.T) ssh.PublicKey {
	t.Helper()
	return writeKey(t, filepath.Join(t.TempDir(), "other_key"))
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// WaitListening waits until addr accepts connections or the server exits
// (exited may be nil).
func WaitListening(addr string, exited <-chan error) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not listening after 20s")
}

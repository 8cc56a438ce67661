// Package remote runs shell scripts on the hosts of an inventory over SSH:
// the transport of drills and faults on real hosts.
//
// Host keys are checked against a known_hosts file (the inventory's, or
// ~/.ssh/known_hosts); a host missing from it, or with another key, is
// refused. Config.InsecureIgnoreHostKey turns the check off, for throwaway
// hosts only, and says so loudly every time. A script runs as root: through
// `sudo -n` when the host's user is not root, so a sudo that would ask for
// a password fails at once instead of hanging.
package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/redlocklab/redlocklab/infra/hosts"
)

// Config is how Dial connects.
type Config struct {
	// KnownHosts is the known_hosts file; empty: ~/.ssh/known_hosts.
	KnownHosts string
	// InsecureIgnoreHostKey accepts any host key. Dial prints a warning on
	// Warn each time.
	InsecureIgnoreHostKey bool
	// Warn receives the warnings; nil: os.Stderr.
	Warn io.Writer
	// DialTimeout bounds the TCP connect and the SSH handshake; 0: 10s.
	DialTimeout time.Duration
}

// InsecureWarning is what Dial prints when host keys are not checked.
const InsecureWarning = "WARNING: --insecure-ignore-host-key: the host key of %s is NOT checked; anyone on the path can pose as it and see and change what the drill runs as root. Use it only on throwaway hosts.\n"

// Client is one SSH connection to one host. Its methods may be called from
// several goroutines; each Run opens its own session.
type Client struct {
	host hosts.Host
	conn *ssh.Client
}

// HostKeyError is a host whose key is unknown or differs from the
// known_hosts file's.
type HostKeyError struct {
	Address string
	File    string
	// Mismatch: the file has another key for the host (it may be
	// impersonated, or was reinstalled); otherwise the host is not in it.
	Mismatch bool
	Err      error
}

func (e *HostKeyError) Error() string {
	if e.Mismatch {
		return fmt.Sprintf("remote: %s: HOST KEY MISMATCH: the key it offers differs from the one in %s (the host was reinstalled, or someone poses as it): check it, then fix its line in %s", e.Address, e.File, e.File)
	}
	return fmt.Sprintf("remote: %s: host key unknown: %s has no line for it (add one with: ssh-keyscan -p PORT HOST >> %s, after checking the key)", e.Address, e.File, e.File)
}

func (e *HostKeyError) Unwrap() error { return e.Err }

// Dial connects to h and authenticates with its key file, or with the
// agent at SSH_AUTH_SOCK when it names none.
func Dial(ctx context.Context, h hosts.Host, cfg Config) (*Client, error) {
	addr := h.SSHAddress()
	hostKey, khFile, err := hostKeyCallback(cfg, addr)
	if err != nil {
		return nil, err
	}
	auth, closeAuth, err := authMethod(h)
	if err != nil {
		return nil, err
	}
	defer closeAuth()
	timeout := cfg.DialTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("remote: %s: %w", addr, err)
	}
	// The handshake has no context: a deadline on the socket bounds it, and
	// a cancelled ctx closes it.
	if dl, ok := dctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(dctx, func() { nc.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(nc, addr, &ssh.ClientConfig{
		User:            h.User,
		Auth:            []ssh.AuthMethod{auth},
		HostKeyCallback: hostKey,
		Timeout:         timeout,
	})
	if !stop() || err != nil {
		nc.Close()
		var ke *knownhosts.KeyError
		switch {
		case errors.As(err, &ke):
			return nil, &HostKeyError{Address: addr, File: khFile, Mismatch: len(ke.Want) > 0, Err: err}
		case err == nil:
			err = context.Cause(dctx)
		}
		return nil, fmt.Errorf("remote: %s: %w", addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	if cfg.InsecureIgnoreHostKey {
		w := cfg.Warn
		if w == nil {
			w = os.Stderr
		}
		fmt.Fprintf(w, InsecureWarning, addr)
	}
	return &Client{host: h, conn: ssh.NewClient(sc, chans, reqs)}, nil
}

func hostKeyCallback(cfg Config, addr string) (ssh.HostKeyCallback, string, error) {
	if cfg.InsecureIgnoreHostKey {
		return ssh.InsecureIgnoreHostKey(), "", nil //nolint:gosec // asked for, and warned about
	}
	file := cfg.KnownHosts
	if file == "" {
		file = "~/.ssh/known_hosts"
	}
	file, err := hosts.ExpandHome(file)
	if err != nil {
		return nil, "", err
	}
	cb, err := knownhosts.New(file)
	if err != nil {
		return nil, "", fmt.Errorf("remote: known hosts for %s: %w (give the inventory's known_hosts, or --insecure-ignore-host-key on throwaway hosts)", addr, err)
	}
	return cb, file, nil
}

func authMethod(h hosts.Host) (ssh.AuthMethod, func(), error) {
	if h.Key != "" {
		path, err := hosts.ExpandHome(h.Key)
		if err != nil {
			return nil, nil, err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("remote: %s: key: %w", h.SSHAddress(), err)
		}
		signer, err := ssh.ParsePrivateKey(b)
		var pp *ssh.PassphraseMissingError
		if errors.As(err, &pp) {
			return nil, nil, fmt.Errorf("remote: key %s is protected by a passphrase: load it into ssh-agent and leave the host's \"key\" out", path)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("remote: key %s: %w", path, err)
		}
		return ssh.PublicKeys(signer), func() {}, nil
	}
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		return nil, nil, fmt.Errorf("remote: %s: the host names no \"key\" and SSH_AUTH_SOCK is not set: give a key file or start ssh-agent", h.SSHAddress())
	}
	ac, err := net.Dial("unix", sock)
	if err != nil {
		return nil, nil, fmt.Errorf("remote: ssh-agent at SSH_AUTH_SOCK: %w", err)
	}
	return ssh.PublicKeysCallback(agent.NewClient(ac).Signers), func() { ac.Close() }, nil
}

// Host returns the host the client is connected to.
func (c *Client) Host() hosts.Host { return c.host }

// Close ends the connection; it may be called more than once.
func (c *Client) Close() error {
	err := c.conn.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// ExitError is a script that ran and failed.
type ExitError struct {
	Address string
	Status  int
	Stderr  string
}

func (e *ExitError) Error() string {
	msg := fmt.Sprintf("remote: %s: exit status %d", e.Address, e.Status)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + s
	}
	return msg
}

// Shell returns the command a script is fed to on the host: a POSIX shell
// reading it on stdin, as root.
func Shell(user string) string {
	if user == "root" {
		return "/bin/sh -s"
	}
	return "sudo -n /bin/sh -s"
}

// Run runs script with /bin/sh on the host as root and returns its stdout.
// A non-zero exit is an *ExitError with the script's stderr. Cancelling ctx
// closes the session; the script may still be running on the host (every
// fault arms its own dead-man switch for this reason).
func (c *Client) Run(ctx context.Context, script string) (string, error) {
	s, err := c.conn.NewSession()
	if err != nil {
		return "", fmt.Errorf("remote: %s: session: %w", c.host.SSHAddress(), err)
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdin = strings.NewReader(script)
	s.Stdout = &stdout
	s.Stderr = &stderr
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	err = s.Run(Shell(c.host.User))
	if ctx.Err() != nil {
		return stdout.String(), fmt.Errorf("remote: %s: %w", c.host.SSHAddress(), context.Cause(ctx))
	}
	var xe *ssh.ExitError
	if errors.As(err, &xe) {
		return stdout.String(), &ExitError{Address: c.host.SSHAddress(), Status: xe.ExitStatus(), Stderr: stderr.String()}
	}
	if err != nil {
		return stdout.String(), fmt.Errorf("remote: %s: %w", c.host.SSHAddress(), err)
	}
	return stdout.String(), nil
}

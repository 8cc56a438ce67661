// Package redistest starts real redis-server processes for tests: each node is
// its own process with its own data directory and configuration file, on a
// free loopback port. Nodes can be stopped cleanly, killed, paused and
// restarted; everything is cleaned up when the test ends.
//
// A missing redis-server ends the test by the rule of testenv.Missing: a
// failure under CI=true, a loud skip otherwise.
package redistest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/internal/tlscert"
)

// Options tune the nodes a Cluster starts.
type Options struct {
	// AppendFsync is "always" (default), "everysec" or "no". Empty means always.
	AppendFsync string
	// Extra lines appended verbatim to every node's redis.conf.
	Extra []string
	// TLS, when set, makes the node TLS-only (tls-port, plain TCP off), as
	// the redis-node module's tls profile does.
	TLS *TLSFiles
}

// TLSFiles are a TLS node's PEM files: its certificate, its key and the CA
// it names to clients.
type TLSFiles struct {
	Cert, Key, CA string
}

// Cluster is a set of independent redis-server processes (not a Redis Cluster:
// no replication, no gossip, exactly what Redlock wants).
type Cluster struct {
	Nodes []*Node
}

// Addrs returns every node's host:port.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Node is one redis-server process.
type Node struct {
	Addr string
	Port int
	Dir  string
	Conf string

	bin string
	tb  testing.TB
	// probe is how waitReady reaches the server (TLS for a conf with it);
	// nil: plain TCP to Addr.
	probe *redis.Options
	tls   *tls.Config // nil for a plain node

	mu  sync.Mutex
	cmd *exec.Cmd
	// done is closed when the current process has been reaped.
	done chan struct{}
	// out is what the current process printed (a bad conf is reported
	// there, not in the log file); read it only after done.
	out *bytes.Buffer
}

// Start launches n nodes and registers their cleanup on tb.
func Start(tb testing.TB, n int, opts Options) *Cluster {
	tb.Helper()
	bin := testenv.Require(tb, "redis-server")
	c := &Cluster{}
	for i := 0; i < n; i++ {
		node := StartNode(tb, bin, opts)
		c.Nodes = append(c.Nodes, node)
	}
	return c
}

// StartNode launches one node with the given redis-server binary in a
// temporary directory and kills it at cleanup.
func StartNode(tb testing.TB, bin string, opts Options) *Node {
	tb.Helper()
	node, err := Launch(bin, tb.TempDir(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	node.tb = tb
	tb.Cleanup(func() { node.Kill() })
	return node
}

// StartConf runs bin with conf, a redis.conf the test wrote itself (its own
// port, ACL users, TLS), in dir until the test ends, and waits until the
// server at probe.Addr (with probe.TLSConfig) answers: a refusal for want of
// authentication counts as an answer. Kill, Stop, Pause and Restart work as
// for StartNode; Client logs in as nobody.
func StartConf(tb testing.TB, bin, conf, dir string, probe *redis.Options) *Node {
	tb.Helper()
	_, p, _ := net.SplitHostPort(probe.Addr)
	port, _ := strconv.Atoi(p)
	node := &Node{Addr: probe.Addr, Port: port, Dir: dir, Conf: conf, bin: bin, tb: tb,
		probe: &redis.Options{Addr: probe.Addr, TLSConfig: probe.TLSConfig}}
	tb.Cleanup(func() { node.Kill() })
	if err := node.start(); err != nil {
		tb.Fatal(err)
	}
	return node
}

// Launch starts one node with the given redis-server binary in dir (created
// if needed) on a free loopback port and waits until it answers. It needs no
// testing.TB, for a TestMain; the caller must Kill the node. Client and
// Restart need a node from Start or StartNode.
func Launch(bin, dir string, opts Options) (*Node, error) {
	fsync := opts.AppendFsync
	if fsync == "" {
		fsync = "always"
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "redis.conf")
	listen := []string{fmt.Sprintf("port %d", port)}
	if t := opts.TLS; t != nil {
		listen = []string{"port 0", fmt.Sprintf("tls-port %d", port), "tls-cert-file " + t.Cert, "tls-key-file " + t.Key,
			"tls-ca-cert-file " + t.CA, "tls-auth-clients no"}
	}
	lines := []string{
		"bind 127.0.0.1",
		"protected-mode yes",
		"daemonize no",
		fmt.Sprintf("dir %s", dir),
		"appendonly yes",
		"appendfsync " + fsync,
		"maxmemory-policy noeviction",
		"save \"\"",
		"logfile " + filepath.Join(dir, "redis.log"),
	}
	lines = append(lines, listen...)
	lines = append(lines, opts.Extra...)
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("redistest: write config: %w", err)
	}
	node := &Node{Addr: fmt.Sprintf("127.0.0.1:%d", port), Port: port, Dir: dir, Conf: conf, bin: bin}
	if opts.TLS != nil {
		// Readiness and Client only need the node to answer; what a client
		// makes of its certificate is what the tests check.
		node.tls = &tls.Config{InsecureSkipVerify: true}
	}
	if err := node.start(); err != nil {
		node.Kill() // one that started but never answered
		return nil, err
	}
	return node, nil
}

func (n *Node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd := exec.Command(n.bin, n.Conf)
	cmd.Dir = n.Dir
	// Own process group, so that a signal meant for the test binary does not
	// reach the servers and they can be stopped as a group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	n.cmd, n.done, n.out = cmd, done, out
	return n.waitReady(15 * time.Second)
}

func (n *Node) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	opts := redis.Options{Addr: n.Addr, TLSConfig: n.tls}
	if n.probe != nil {
		opts = *n.probe
	}
	opts.DialTimeout, opts.MaxRetries = 200*time.Millisecond, -1
	c := redis.NewClient(&opts)
	defer c.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil || redis.IsAuthError(err) {
			return nil
		}
		select {
		case <-n.done:
			log, _ := os.ReadFile(filepath.Join(n.Dir, "redis.log"))
			return fmt.Errorf("redistest: redis-server on %s exited during start: %s%s", n.Addr, n.out, tail(string(log), 800))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: redis-server on %s not ready after %v: %w", n.Addr, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Client returns a go-redis client for the node, closed at cleanup: plain,
// or for a TLS node TLS without verifying its certificate.
func (n *Node) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: n.Addr, TLSConfig: n.tls})
	n.tb.Cleanup(func() { c.Close() })
	return c
}

// Running reports whether the process is alive (paused counts as running).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL (a crash: no shutdown, no final fsync) and waits for the
// process to go. It is a no-op when the node is not running.
func (n *Node) Kill() {
	n.signalAndWait(syscall.SIGKILL)
}

// Stop shuts the node down cleanly (SIGTERM: redis-server fsyncs and exits).
func (n *Node) Stop() {
	n.signalAndWait(syscall.SIGTERM)
}

func (n *Node) signalAndWait(sig syscall.Signal) {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	// A paused process must be continued to act on SIGTERM.
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Pause stops the process with SIGSTOP: connections stay open, nothing answers.
func (n *Node) Pause() { n.signal(syscall.SIGSTOP) }

// Resume continues a paused process.
func (n *Node) Resume() { n.signal(syscall.SIGCONT) }

func (n *Node) signal(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && n.cmd.Process != nil {
		_ = syscall.Kill(n.cmd.Process.Pid, sig)
	}
}

// Restart starts a stopped or killed node again on the same port and data
// directory (so the AOF is replayed).
func (n *Node) Restart() {
	n.tb.Helper()
	if n.Running() {
		n.tb.Fatalf("redistest: restart of %s while it is running", n.Addr)
	}
	if err := n.start(); err != nil {
		n.tb.Fatal(err)
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	port, err := freePort()
	if err != nil {
		tb.Fatal(err)
	}
	return port
}

// handedOut are the ports freePort returned in this process: the kernel
// may offer a port again as soon as its listener closes, and two of a
// test's ports must never be the same.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

func freePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redistest: free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("redistest: free port: the kernel offered only ports already handed out")
}

// FreeBasePort returns a base port such that base+offset+i is free on
// loopback right now for every offset and every i in 1..n: room for n nodes
// laid out like the lab's (offsets from lab.PortOffsets).
func FreeBasePort(tb testing.TB, n int, offsets ...int) int {
	tb.Helper()
	for range 50 {
		base := 20000 + rand.IntN(40000)
		if PortsFree(base, n, offsets...) {
			return base
		}
	}
	tb.Fatal("redistest: no free base port")
	return 0
}

// PortsFree reports whether base+offset+i is free on loopback right now for
// every offset and every i in 1..n.
func PortsFree(base, n int, offsets ...int) bool {
	for _, off := range offsets {
		for i := 1; i <= n; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+off+i))
			if err != nil {
				return false
			}
			l.Close()
		}
	}
	return true
}

// FreeStableBasePort is FreeBasePort for ports that must stay free for a
// while: a lab binds them seconds later, from other processes. The base is
// chosen below the kernel's ephemeral port range, from which every
// outgoing connection made meanwhile (on this machine, by any process)
// takes its local port.
func FreeStableBasePort(tb testing.TB, n int, offsets ...int) int {
	tb.Helper()
	span := n
	for _, off := range offsets {
		span = max(span, off+n)
	}
	const low = 10000
	high := ephemeralLow() - span - 1
	if high <= low {
		return FreeBasePort(tb, n, offsets...)
	}
	for range 50 {
		base := low + rand.IntN(high-low)
		if PortsFree(base, n, offsets...) {
			return base
		}
	}
	tb.Fatal("redistest: no free base port below the ephemeral range")
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}

// StartTLS starts one TLS-only node (see Options.TLS) whose certificate,
// for hosts (IP addresses or names) and valid from notBefore to notAfter,
// is signed by ca; it writes the files into a temporary directory.
func StartTLS(tb testing.TB, ca *tlscert.CA, hosts []string, notBefore, notAfter time.Time) *Node {
	tb.Helper()
	bin := testenv.Require(tb, "redis-server")
	pair, err := ca.Issue(hosts, notBefore, notAfter)
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	f := tlscert.Files{CA: filepath.Join(dir, tlscert.CAFile), Cert: filepath.Join(dir, tlscert.CertFile), Key: filepath.Join(dir, tlscert.KeyFile)}
	if err := tlscert.WritePair(f, ca, pair); err != nil {
		tb.Fatal(err)
	}
	return StartNode(tb, bin, Options{TLS: &TLSFiles{Cert: f.Cert, Key: f.Key, CA: f.CA}})
}

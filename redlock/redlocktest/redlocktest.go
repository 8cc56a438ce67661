//go:build unix

package redlocktest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
)

// Options tune the nodes a Cluster starts.
type Options struct {
	// AppendFsync is "always" (default), "everysec" or "no". Empty means always.
	AppendFsync string
	// Extra lines appended verbatim to every node's redis.conf.
	Extra []string
	// TLS, when set, makes the node TLS-only: tls-port, plain TCP off,
	// clients not asked for a certificate.
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
	Addr string // host:port
	Port int
	Dir  string // data directory, also the process's working directory
	Conf string // path of its redis.conf

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
	bin := Server(tb)
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
		return nil, fmt.Errorf("redlocktest: %w", err)
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
		return nil, fmt.Errorf("redlocktest: write config: %w", err)
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
	cmd.SysProcAttr = sysProcAttr()
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redlocktest: start redis-server: %w", err)
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
			return fmt.Errorf("redlocktest: redis-server on %s exited during start: %s%s", n.Addr, n.out, tail(string(log), 800))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redlocktest: redis-server on %s not ready after %v: %w", n.Addr, limit, err)
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
		n.tb.Fatalf("redlocktest: restart of %s while it is running", n.Addr)
	}
	if err := n.start(); err != nil {
		n.tb.Fatal(err)
	}
}

// CommandCalls returns how often the node ran cmd (a lower-case command
// name, as INFO commandstats spells it) since it started.
func (n *Node) CommandCalls(tb testing.TB, cmd string) int {
	tb.Helper()
	s, err := n.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("redlocktest: INFO commandstats on %s: %v", n.Addr, err)
	}
	for line := range strings.Lines(s) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			var calls int
			fmt.Sscanf(rest, "%d", &calls)
			return calls
		}
	}
	return 0
}

// Values returns the value of key on every node of nodes, "" where it is
// absent: the tokens a lock left behind.
func Values(tb testing.TB, nodes []*Node, key string) []string {
	tb.Helper()
	out := make([]string, len(nodes))
	for i, n := range nodes {
		v, err := n.Client().Get(context.Background(), key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			tb.Fatalf("redlocktest: GET %s on node %d (%s): %v", key, i, n.Addr, err)
		}
		out[i] = v
	}
	return out
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
			return 0, fmt.Errorf("redlocktest: free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("redlocktest: free port: the kernel offered only ports already handed out")
}

// Main is the body of a TestMain whose tests share nodes (an Example
// cannot take a *testing.T to start its own): it starts n nodes, hands
// their addresses to use, runs m's tests and kills the nodes, and returns
// the exit code for os.Exit. Without redis-server it runs no test and
// returns 1 under CI=true, 0 otherwise, having said why on stderr.
func Main(m *testing.M, n int, use func(addrs []string)) int {
	bin, err := ServerPath()
	if err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "FAIL: %v (CI=true, so this is a failure)\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "SKIPPING every test of this package: %v\n", err)
		return 0
	}
	dir, err := os.MkdirTemp("", "redlocktest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "redlocktest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	addrs := make([]string, n)
	for i := range addrs {
		node, err := Launch(bin, filepath.Join(dir, strconv.Itoa(i)), Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer node.Kill()
		addrs[i] = node.Addr
	}
	use(addrs)
	return m.Run()
}

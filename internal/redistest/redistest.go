// Package redistest starts real redis-server processes for tests: each node is
// its own process with its own data directory and configuration file, on a
// free loopback port. Nodes can be stopped cleanly, killed, paused and
// restarted; everything is cleaned up when the test ends.
//
// Outside CI a missing redis-server skips the test with a loud message; with
// CI=true it fails the test, so a broken install can never pass silently.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Require returns the path of the named binary. When it is missing the test
// fails under CI=true and is skipped, loudly, otherwise.
func Require(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s is required but not on PATH (CI=true, so this is a failure): %v", name, err)
	}
	tb.Skipf("SKIPPING: %s is not on PATH; install it (see .ci/run) to run this test", name)
	return ""
}

// Options tune the nodes a Cluster starts.
type Options struct {
	// AppendFsync is "always" (default), "everysec" or "no". Empty means always.
	AppendFsync string
	// Extra lines appended verbatim to every node's redis.conf.
	Extra []string
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

	mu  sync.Mutex
	cmd *exec.Cmd
	// done is closed when the current process has been reaped.
	done chan struct{}
}

// Start launches n nodes and registers their cleanup on tb.
func Start(tb testing.TB, n int, opts Options) *Cluster {
	tb.Helper()
	bin := Require(tb, "redis-server")
	c := &Cluster{}
	for i := 0; i < n; i++ {
		node := StartNode(tb, bin, opts)
		c.Nodes = append(c.Nodes, node)
	}
	return c
}

// StartNode launches one node with the given redis-server binary.
func StartNode(tb testing.TB, bin string, opts Options) *Node {
	tb.Helper()
	fsync := opts.AppendFsync
	if fsync == "" {
		fsync = "always"
	}
	dir := tb.TempDir()
	port := FreePort(tb)
	conf := filepath.Join(dir, "redis.conf")
	lines := []string{
		"bind 127.0.0.1",
		fmt.Sprintf("port %d", port),
		"protected-mode yes",
		"daemonize no",
		fmt.Sprintf("dir %s", dir),
		"appendonly yes",
		"appendfsync " + fsync,
		"maxmemory-policy noeviction",
		"save \"\"",
		"logfile " + filepath.Join(dir, "redis.log"),
	}
	lines = append(lines, opts.Extra...)
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		tb.Fatalf("redistest: write config: %v", err)
	}
	node := &Node{Addr: fmt.Sprintf("127.0.0.1:%d", port), Port: port, Dir: dir, Conf: conf, bin: bin, tb: tb}
	if err := node.start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { node.Kill() })
	return node
}

func (n *Node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd := exec.Command(n.bin, n.Conf)
	cmd.Dir = n.Dir
	// Own process group, so that a signal meant for the test binary does not
	// reach the servers and they can be stopped as a group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	n.cmd, n.done = cmd, done
	return n.waitReady(10 * time.Second)
}

func (n *Node) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	c := redis.NewClient(&redis.Options{Addr: n.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-n.done:
			log, _ := os.ReadFile(filepath.Join(n.Dir, "redis.log"))
			return fmt.Errorf("redistest: redis-server on %s exited during start: %s", n.Addr, tail(string(log), 800))
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

// Client returns a plain go-redis client for the node, closed at cleanup.
func (n *Node) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: n.Addr})
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

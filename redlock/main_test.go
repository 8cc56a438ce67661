package redlock_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sharedAddrs are five redis-server nodes started once by TestMain for the
// Example functions (which cannot take a *testing.T) and the benchmarks.
// Tests that kill or reconfigure nodes start their own via redistest.
var sharedAddrs []string

func TestMain(m *testing.M) {
	// Dead nodes are part of the tests; go-redis would log every refused dial.
	redis.SetLogger(quietLogger{})
	os.Exit(runMain(m))
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func runMain(m *testing.M) int {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "FAIL: redis-server is required but not on PATH (CI=true): %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "SKIPPING every redlock test: redis-server is not on PATH; install it (see .ci/run)\n")
		return 0
	}
	dir, err := os.MkdirTemp("", "redlock-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "redlock test: ", err)
		return 1
	}
	defer os.RemoveAll(dir)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	for i := range 5 {
		cmd, addr, err := startServer(bin, filepath.Join(dir, fmt.Sprint(i)))
		if err != nil {
			fmt.Fprintln(os.Stderr, "redlock test: ", err)
			return 1
		}
		procs = append(procs, cmd)
		sharedAddrs = append(sharedAddrs, addr)
	}
	return m.Run()
}

// startServer runs one redis-server configured as the Redlock docs advise.
func startServer(bin, dir string) (*exec.Cmd, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := strings.Join([]string{
		"bind 127.0.0.1", fmt.Sprintf("port %d", port), "daemonize no", "dir " + dir,
		"appendonly yes", "appendfsync always", "maxmemory-policy noeviction", `save ""`,
		"logfile " + filepath.Join(dir, "redis.log"),
	}, "\n") + "\n"
	confPath := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, confPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start redis-server: %w", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return cmd, addr, nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return nil, "", fmt.Errorf("redis-server on %s not ready: %v\n%s", addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

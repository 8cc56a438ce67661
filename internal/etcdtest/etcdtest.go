// Package etcdtest starts real etcd clusters for tests: each member is its own
// etcd process with its own data directory under tb.TempDir(), on free
// loopback client and peer ports, with etcd's defaults (fsync on, election
// timeout 1 s). A member can be killed, stopped and continued (SIGSTOP,
// SIGCONT) and restarted on its data; the cluster says which member leads.
// Every process dies with the test: at tb.Cleanup, and by Pdeathsig when the
// test binary itself dies.
//
// The binary is REDLAB_ETCD_BIN when set, else bin/etcd at the module root
// (`make etcd` builds it), else etcd on PATH. A missing binary ends the test
// by the rule of testenv.Missing: a failure under CI=true, a loud skip
// otherwise.
package etcdtest

import (
	"context"
	"errors"
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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/redlocklab/redlocklab/internal/etcdstatus"
	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// startLimit bounds how long a cluster or a restarted member may take to be
// ready; a loaded two-core machine with fsync on needs a few seconds.
const startLimit = 30 * time.Second

// Options tune the members a Cluster starts.
type Options struct {
	// Extra flags appended to every member's command line, such as
	// "--election-timeout=500".
	Extra []string
}

// Cluster is one etcd cluster of len(Members) members.
type Cluster struct {
	Members []*Member

	tb testing.TB
}

// Member is one etcd process of a Cluster.
type Member struct {
	// Name is the member's name in the cluster: m1, m2, ...
	Name string
	// ClientURL and PeerURL are where it serves clients and its peers.
	ClientURL string
	PeerURL   string
	// Dir holds its data directory (data/) and its log (etcd.log).
	Dir string

	bin  string
	args []string
	tb   testing.TB

	mu  sync.Mutex
	cmd *exec.Cmd
	// done is closed when the current process has been reaped.
	done chan struct{}
	log  *os.File
}

// Binary returns the etcd binary the harness runs: REDLAB_ETCD_BIN, else
// bin/etcd at the root of the module holding the working directory, else
// etcd on PATH. The error says how to get one.
func Binary() (string, error) {
	if p := os.Getenv("REDLAB_ETCD_BIN"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("etcdtest: REDLAB_ETCD_BIN=%s is not an executable: %w", p, err)
		}
		return p, nil
	}
	if root, err := moduleRoot(); err == nil {
		p := filepath.Join(root, "bin", "etcd")
		if _, err := exec.LookPath(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("etcd")
	if err != nil {
		return "", fmt.Errorf("etcdtest: no etcd: not in REDLAB_ETCD_BIN, not at bin/etcd of the module, not on PATH; build it with 'make etcd' (or scripts/setup.sh test): %w", err)
	}
	return p, nil
}

// moduleRoot is the nearest directory above the working directory with a
// go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("etcdtest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Start launches an n-member cluster (n >= 1; 1 or 3 in practice), waits
// until every member is healthy and registers the members' end on tb.
func Start(tb testing.TB, n int, opts Options) *Cluster {
	tb.Helper()
	if n < 1 {
		tb.Fatalf("etcdtest: a cluster of %d members", n)
	}
	bin, err := Binary()
	if err != nil {
		testenv.Missing(tb, err.Error())
	}
	c := &Cluster{tb: tb}
	peers := make([]string, n)
	for i := range n {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i+1),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", redlocktest.FreePort(tb)),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", redlocktest.FreePort(tb)),
			Dir:       tb.TempDir(),
			bin:       bin,
			tb:        tb,
		}
		peers[i] = m.Name + "=" + m.PeerURL
		c.Members = append(c.Members, m)
	}
	token := fmt.Sprintf("etcdtest-%d-%d", os.Getpid(), time.Now().UnixNano())
	for _, m := range c.Members {
		m.args = append([]string{
			"--name=" + m.Name,
			"--data-dir=" + filepath.Join(m.Dir, "data"),
			"--listen-client-urls=" + m.ClientURL,
			"--advertise-client-urls=" + m.ClientURL,
			"--listen-peer-urls=" + m.PeerURL,
			"--initial-advertise-peer-urls=" + m.PeerURL,
			"--initial-cluster=" + strings.Join(peers, ","),
			"--initial-cluster-token=" + token,
			"--initial-cluster-state=new",
		}, opts.Extra...)
		// Registered after the member's TempDir, so it runs before the
		// directory is removed.
		tb.Cleanup(m.Kill)
		if err := m.start(); err != nil {
			tb.Fatal(err)
		}
	}
	c.WaitHealthy()
	return c
}

func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.log == nil {
		f, err := os.OpenFile(filepath.Join(m.Dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("etcdtest: %w", err)
		}
		m.log = f
		m.tb.Cleanup(func() { f.Close() })
	}
	cmd := exec.Command(m.bin, m.args...)
	cmd.Dir = m.Dir
	cmd.Stdout, cmd.Stderr = m.log, m.log
	// Its own process group, so that a signal meant for the test binary does
	// not reach it; SIGKILL when the test binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcdtest: start %s: %w", m.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	m.cmd, m.done = cmd, done
	return nil
}

// WaitHealthy waits until every member reports itself healthy (it has a
// leader and serves a linearizable read), and fails the test when one has
// exited or the cluster is not healthy within a bound.
func (c *Cluster) WaitHealthy() {
	c.tb.Helper()
	deadline := time.Now().Add(startLimit)
	for _, m := range c.Members {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			err := etcdstatus.Healthy(ctx, m.ClientURL)
			cancel()
			if err == nil {
				break
			}
			if !m.Running() {
				c.tb.Fatalf("etcdtest: %s exited: %s", m.Name, m.LogTail(1500))
			}
			if time.Now().After(deadline) {
				c.tb.Fatalf("etcdtest: %s not healthy after %v: %v\n%s", m.Name, startLimit, err, m.LogTail(1500))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Endpoints returns every member's client URL, for clientv3.Config.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.ClientURL
	}
	return out
}

// Client returns a client of the whole cluster (every member's endpoint),
// closed at cleanup.
func (c *Cluster) Client() *clientv3.Client {
	c.tb.Helper()
	return newClient(c.tb, c.Endpoints())
}

func newClient(tb testing.TB, endpoints []string) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		tb.Fatalf("etcdtest: client of %v: %v", endpoints, err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// Client returns a client of this member alone, closed at cleanup: with
// clientv3.WithSerializable a read is answered from its own store.
func (m *Member) Client() *clientv3.Client {
	m.tb.Helper()
	return newClient(m.tb, []string{m.ClientURL})
}

// Leader returns the member that leads now, as etcdstatus.Leader decides (a
// majority of the cluster names it); the error wraps etcdstatus.ErrNoLeader
// when there is none.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	i, _, err := etcdstatus.Leader(ctx, c.Endpoints())
	if err != nil {
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	return c.Members[i], nil
}

// WaitLeader waits until a member leads and returns it; not one of except
// (the leader just killed, whose successor the test wants). It fails the
// test when there is none within a bound.
func (c *Cluster) WaitLeader(except ...*Member) *Member {
	c.tb.Helper()
	deadline := time.Now().Add(startLimit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		m, err := c.Leader(ctx)
		cancel()
		if err == nil && !contains(except, m) {
			return m
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("etcdtest: no leader (other than %v) after %v: %v", names(except), startLimit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func contains(ms []*Member, m *Member) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

func names(ms []*Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}

// Running reports whether the member's process is alive (stopped counts as
// running).
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL (a crash) and waits for the process to go; a no-op when
// it is not running. It is safe to call more than once.
func (m *Member) Kill() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Stop freezes the member with SIGSTOP (named after the signal: it is not a
// shutdown): its connections stay open and nothing answers, like a long GC
// pause or a VM stall. Cont resumes it.
func (m *Member) Stop() { m.signal(syscall.SIGSTOP) }

// Cont resumes a member frozen by Stop.
func (m *Member) Cont() { m.signal(syscall.SIGCONT) }

func (m *Member) signal(sig syscall.Signal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil && m.done != nil {
		select {
		case <-m.done:
		default:
			_ = syscall.Kill(m.cmd.Process.Pid, sig)
		}
	}
}

// Restart starts a killed member again on its ports and data directory and
// returns once it listens on its client port. It does not wait for the
// member to rejoin: that needs a quorum, which the test may be about to
// restore; WaitHealthy waits for it.
func (m *Member) Restart() {
	m.tb.Helper()
	if m.Running() {
		m.tb.Fatalf("etcdtest: restart of %s while it is running", m.Name)
	}
	if err := m.start(); err != nil {
		m.tb.Fatal(err)
	}
	host := strings.TrimPrefix(m.ClientURL, "http://")
	deadline := time.Now().Add(startLimit)
	for {
		conn, err := net.DialTimeout("tcp", host, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return
		}
		if !m.Running() {
			m.tb.Fatalf("etcdtest: %s exited on restart: %s", m.Name, m.LogTail(1500))
		}
		if time.Now().After(deadline) {
			m.tb.Fatalf("etcdtest: %s does not listen on %s after %v: %v", m.Name, host, startLimit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ID asks the member its member ID.
func (m *Member) ID(ctx context.Context) (uint64, error) {
	s, err := etcdstatus.Get(ctx, m.ClientURL)
	if err != nil {
		return 0, fmt.Errorf("etcdtest: %s: %w", m.Name, err)
	}
	return s.MemberID, nil
}

// LogTail returns the last n bytes of the member's log, for failure messages.
func (m *Member) LogTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(m.Dir, "etcd.log"))
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

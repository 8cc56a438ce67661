package foreign

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/proc"
	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// The helper process of TestAdapterDiesWithTheLab: it starts the adapter
// named by the variable, prints the adapter's pid and waits to be killed.
const helperEnv = "FOREIGN_TEST_PARENT_OF"

func TestMain(m *testing.M) {
	if script := os.Getenv(helperEnv); script != "" {
		c, err := Start(Config{Name: "helper", Command: []string{"sh", script}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(c.Pid())
		select {}
	}
	os.Exit(m.Run())
}

// nodeRedlock is the argv of the node-redlock adapter, or the test ends by
// testenv.Missing when node or its npm packages are not there.
func nodeRedlock(t *testing.T, args ...string) []string {
	t.Helper()
	node := testenv.Require(t, "node")
	dir, err := filepath.Abs(filepath.Join("..", "..", "foreign", "node-redlock"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "redlock", "package.json")); err != nil {
		testenv.Missing(t, "the node-redlock adapter's packages are not installed: run `npm ci --prefix inventory/foreign/node-redlock` (scripts/setup.sh test does)")
	}
	return append([]string{node, filepath.Join(dir, "adapter.js")}, args...)
}

// aclUser is the login the test nodes give the adapter: the lab's redlock
// user (infra/modules/redis-node), lock keys and lock commands only.
var aclUser = []string{"user redlock on >s3cret resetkeys ~lock:* resetchannels -@all +hello +auth +ping +client|setname " +
	"+set +get +del +pexpire +pttl +exists +eval +evalsha +script|load +script|exists +time"}

// startNodeRedlock starts three nodes and the node-redlock adapter on
// them, closed at the end of the test.
func startNodeRedlock(t *testing.T, args ...string) (*Client, *redlocktest.Cluster) {
	t.Helper()
	argv := nodeRedlock(t, args...)
	cluster := redlocktest.Start(t, 3, redlocktest.Options{Extra: aclUser})
	return startOn(t, cluster, argv), cluster
}

func startOn(t *testing.T, cluster *redlocktest.Cluster, argv []string) *Client {
	t.Helper()
	var stderr strings.Builder
	c, err := Start(Config{Name: "node-redlock", Command: argv, Nodes: nodeaddr.List{Addrs: cluster.Addrs()},
		Username: "redlock", Password: "s3cret", Stderr: &syncWriter{w: &stderr}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { c.Close() }) // the tests that stop it check Close themselves
	return c
}

type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// quorumHolds reports whether a majority of the nodes hold key with value.
func quorumHolds(t *testing.T, cluster *redlocktest.Cluster, key, value string) bool {
	t.Helper()
	n := 0
	for _, v := range redlocktest.Values(t, cluster.Nodes, key) {
		if v == value {
			n++
		}
	}
	return n > len(cluster.Nodes)/2
}

// TestNodeRedlockLifecycle: the adapter starts, says what it runs, grants a
// lock whose validity is what its client claimed, extends and releases
// it, and exits when its input ends.
func TestNodeRedlockLifecycle(t *testing.T) {
	c, cluster := startNodeRedlock(t)
	ctx := testCtx(t)
	if got, want := c.ClientName(), "node-redlock (redlock 4.2.0, redis 3.1.2)"; got != want {
		t.Errorf("ClientName: got %q, want %q", got, want)
	}
	ttl := 2 * time.Second
	before := time.Now()
	g, err := c.Acquire(ctx, "lock:a", ttl)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if g.Token == "" || g.Attempts != 1 || g.Validity <= 0 || g.Validity > ttl {
		t.Errorf("grant: got %+v, want a token, 1 attempt and a validity in (0, %v]", g, ttl)
	}
	if g.Sent.Before(before) || !g.Deadline().Equal(g.Sent.Add(g.Validity)) {
		t.Errorf("grant: sent %v (acquire called at %v), deadline %v; want the deadline sent + validity", g.Sent, before, g.Deadline())
	}
	if !quorumHolds(t, cluster, "lock:a", g.Token) {
		t.Errorf("the nodes hold %q, want the token %s on a quorum", redlocktest.Values(t, cluster.Nodes, "lock:a"), g.Token)
	}

	e, err := c.Extend(ctx, "lock:a", g.Token, 30*time.Second)
	if err != nil || e.Token != g.Token || e.Validity <= ttl {
		t.Fatalf("Extend: got %+v, %v; want the same token valid for more than %v", e, err, ttl)
	}
	if pttl := cluster.Nodes[0].Client().PTTL(ctx, "lock:a").Val(); pttl <= ttl {
		t.Errorf("PTTL after the extend: got %v, want more than %v", pttl, ttl)
	}
	if err := c.Release(ctx, "lock:a", g.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if v := redlocktest.Values(t, cluster.Nodes, "lock:a"); strings.Join(v, "") != "" {
		t.Errorf("after the release the nodes hold %q, want nothing", v)
	}
	var ae *AnswerError
	if err := c.Release(ctx, "lock:a", g.Token); !errors.As(err, &ae) || !errors.Is(err, ErrContended) {
		t.Errorf("second Release: got %v, want an AnswerError of class contended", err)
	}
	if _, err := c.Extend(ctx, "lock:a", "no-such-token", ttl); !errors.Is(err, ErrContended) {
		t.Errorf("Extend of an unknown token: got %v, want contended", err)
	}

	pid := c.Pid()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: got %v, want a clean exit", err)
	}
	if proc.Alive(pid) {
		t.Errorf("adapter pid %d still alive after Close", pid)
	}
	if _, err := c.Acquire(ctx, "lock:b", ttl); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire after Close: got %v, want ErrClosed", err)
	}
}

// TestNodeRedlockConcurrent: many acquires in flight at once on one
// adapter, answered out of order and matched by id; one key contended by
// several callers is granted to exactly one.
func TestNodeRedlockConcurrent(t *testing.T) {
	c, cluster := startNodeRedlock(t)
	ctx := testCtx(t)
	const n = 200
	grants := make([]Grant, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { grants[i], errs[i] = c.Acquire(ctx, "lock:k"+strconv.Itoa(i), 30*time.Second) })
	}
	wg.Wait()
	tokens := map[string]bool{}
	for i, g := range grants {
		if errs[i] != nil {
			t.Fatalf("Acquire %d: %v", i, errs[i])
		}
		if tokens[g.Token] {
			t.Fatalf("token %s granted twice", g.Token)
		}
		tokens[g.Token] = true
		if i%20 == 0 && !quorumHolds(t, cluster, "lock:k"+strconv.Itoa(i), g.Token) {
			t.Errorf("key %d: the nodes hold %q, want its own token %s", i, redlocktest.Values(t, cluster.Nodes, "lock:k"+strconv.Itoa(i)), g.Token)
		}
	}
	for i := range n {
		wg.Go(func() { errs[i] = c.Release(ctx, "lock:k"+strconv.Itoa(i), grants[i].Token) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Release %d: %v", i, err)
		}
	}

	// One key, five callers, nobody releases: node-redlock retries 10
	// times, then says contended.
	const m = 5
	var granted, contended int
	var mu sync.Mutex
	for range m {
		wg.Go(func() {
			_, err := c.Acquire(ctx, "lock:one", 30*time.Second)
			mu.Lock()
			defer mu.Unlock()
			var ae *AnswerError
			switch {
			case err == nil:
				granted++
			case errors.As(err, &ae) && errors.Is(err, ErrContended) && ae.Attempts == 11:
				contended++
			default:
				t.Errorf("Acquire of a held key: got %v, want contended after 11 attempts", err)
			}
		})
	}
	wg.Wait()
	if granted != 1 || contended != m-1 {
		t.Errorf("one key, %d callers: %d granted, %d contended; want 1 and %d", m, granted, contended, m-1)
	}
}

// TestNodeRedlockClassifies: node-redlock's failures carry the class the
// lab counts: a key held elsewhere is contended, nodes that refuse the
// login are unavailable.
func TestNodeRedlockClassifies(t *testing.T) {
	argv := nodeRedlock(t)
	// The default user off, as in the lab: a refused login can do nothing.
	cluster := redlocktest.Start(t, 3, redlocktest.Options{Extra: append([]string{"user default off"}, aclUser...)})
	bad, err := Start(Config{Name: "node-redlock", Command: argv, Nodes: nodeaddr.List{Addrs: cluster.Addrs()}, Username: "redlock", Password: "wrong"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { bad.Close() })
	good := startOn(t, cluster, argv)
	ctx := testCtx(t)
	if _, err := good.Acquire(ctx, "lock:c", time.Minute); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	for _, tt := range []struct {
		name string
		c    *Client
		want Class
	}{
		{"held elsewhere", good, Contended},
		{"login refused", bad, Unavailable},
	} {
		_, err := tt.c.Acquire(ctx, "lock:c", time.Minute)
		var ae *AnswerError
		if !errors.As(err, &ae) || ae.Class != tt.want {
			t.Errorf("%s: got %v, want an answer of class %s", tt.name, err, tt.want)
		}
	}
}

// TestAbandonedGrantIsReleased: an acquire given up by its caller that the
// client grants later is released by the lab, not left to its TTL.
func TestAbandonedGrantIsReleased(t *testing.T) {
	c, cluster := startNodeRedlock(t)
	for _, n := range cluster.Nodes {
		if err := n.Client().Set(t.Context(), "lock:late", "someone-else", 400*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(short, "lock:late", time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with a short context: got %v, want context.DeadlineExceeded", err)
	}
	// node-redlock retries every 200 ms: once someone-else's key expired it
	// wins, for a minute, and the lab releases what it no longer wants: its
	// unlock script's DEL (a failed attempt's unlock deletes nothing).
	redlocktest.Eventually(t, 20*time.Second, "the late grant is released", func() bool {
		dels := 0
		for _, n := range cluster.Nodes {
			dels += n.CommandCalls(t, "del")
		}
		return dels > len(cluster.Nodes)/2 && strings.Join(redlocktest.Values(t, cluster.Nodes, "lock:late"), "") == ""
	})
}

// TestReleaseWithDel is the protocol test of the broken adapter: a holder
// whose lock expired releases after the next holder took the key. The
// right release (node-redlock's unlock) deletes nothing and says
// contended; the broken one (a plain DEL) deletes the next holder's lock.
func TestReleaseWithDel(t *testing.T) {
	for _, tt := range []struct {
		name     string
		args     []string
		deletes  bool
		wantErrs error
	}{
		{"node-redlock", nil, false, ErrContended},
		{"node-redlock-del", []string{"--release-with-del"}, true, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stale, cluster := startNodeRedlock(t, tt.args...)
			next := startOn(t, cluster, nodeRedlock(t))
			ctx := testCtx(t)
			a, err := stale.Acquire(ctx, "lock:x", 300*time.Millisecond)
			if err != nil {
				t.Fatalf("first holder: %v", err)
			}
			redlocktest.Eventually(t, 10*time.Second, "the first lock expires", func() bool {
				return strings.Join(redlocktest.Values(t, cluster.Nodes, "lock:x"), "") == ""
			})
			b, err := next.Acquire(ctx, "lock:x", time.Minute)
			if err != nil {
				t.Fatalf("next holder: %v", err)
			}
			err = stale.Release(ctx, "lock:x", a.Token)
			if tt.wantErrs == nil && err != nil || tt.wantErrs != nil && !errors.Is(err, tt.wantErrs) {
				t.Errorf("stale release: got %v, want %v", err, tt.wantErrs)
			}
			if held := quorumHolds(t, cluster, "lock:x", b.Token); held == tt.deletes {
				t.Errorf("after the stale release the nodes hold %q; next holder's lock kept: %v, want %v",
					redlocktest.Values(t, cluster.Nodes, "lock:x"), held, !tt.deletes)
			}
		})
	}
}

// TestAdapterKilledIsUnavailable: an adapter that dies with requests in
// flight fails them as unavailable, at once, and every request after.
func TestAdapterKilledIsUnavailable(t *testing.T) {
	c, cluster := startNodeRedlock(t)
	ctx := testCtx(t)
	for _, n := range cluster.Nodes {
		n.Client().Set(ctx, "lock:held", "someone-else", time.Minute)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "lock:held", time.Second) // retries for about 2 s
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := syscall.Kill(c.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-done
	var ee *ExitError
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ee) || !strings.Contains(err.Error(), "signal: killed") {
		t.Fatalf("Acquire in flight when the adapter died: got %v, want an ExitError (signal: killed) matching ErrUnavailable", err)
	}
	if _, err := c.Acquire(ctx, "lock:other", time.Second); !errors.As(err, &ee) {
		t.Errorf("Acquire after the adapter died: got %v, want the ExitError", err)
	}
	if err := c.Close(); !errors.As(err, &ee) {
		t.Errorf("Close: got %v, want the ExitError that stopped it", err)
	}
}

// fake writes a shell script standing in for an adapter.
func fake(t *testing.T, body string) []string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "adapter.sh")
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"sh", p}
}

const helloLine = `echo '{"protocol":1,"client":"fake 1.0"}'` + "\n"

// linger starts a fake adapter with a child that sleeps, its pid in the
// script's path + ".pid"; the fake ends by waiting for it.
const linger = "sleep 60 & echo $! > \"$0.pid\"\n"

// TestProtocolViolations: a line the protocol does not allow is a clear
// error naming the line, and the adapter is stopped (its children too),
// not waited for.
func TestProtocolViolations(t *testing.T) {
	for _, tt := range []struct {
		name, body, want string
	}{
		{"not JSON", linger + helloLine + "read l\necho 'Lock acquired!'\nwait\n", `line 2 ("Lock acquired!"): not an answer`},
		{"no id", linger + helloLine + "read l\necho '{\"ok\":true}'\nwait\n", "an answer without an id"},
		{"unknown id", linger + helloLine + "read l\necho '{\"id\":99,\"ok\":true,\"token\":\"t\",\"validity_ms\":5}'\nwait\n", "an answer to id 99, which no request awaits"},
		{"no validity", linger + helloLine + "read l\necho '{\"id\":1,\"ok\":true,\"token\":\"t\"}'\nwait\n", "a granted acquire without a positive validity_ms"},
		{"no token", linger + helloLine + "read l\necho '{\"id\":1,\"ok\":true,\"validity_ms\":100}'\nwait\n", "a granted acquire without a token"},
		{"unknown class", linger + helloLine + "read l\necho '{\"id\":1,\"ok\":false,\"error\":\"busy\"}'\nwait\n", `with error "busy" (want one of contended, unavailable, other)`},
		{"cut line", helloLine + "read l\nprintf '{\"id\":1'\n", "the output ended inside a line"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			argv := fake(t, tt.body)
			c, err := Start(Config{Name: "fake", Command: argv})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Acquire(testCtx(t), "lock:x", time.Second)
			var pe *ProtocolError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrUnavailable) {
				t.Errorf("got %v, want a ProtocolError containing %q", err, tt.want)
			}
			c.Close()
			if !strings.Contains(tt.body, linger) {
				return
			}
			b, err := os.ReadFile(argv[1] + ".pid")
			child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || child == 0 {
				t.Fatalf("the fake's child pid: %q, %v", b, err)
			}
			redlocktest.Eventually(t, 10*time.Second, "the adapter's child dies with it", func() bool { return !proc.Alive(child) })
		})
	}
}

// TestStartFailures: an adapter that never says hello says why.
func TestStartFailures(t *testing.T) {
	for _, tt := range []struct {
		name, body, want string
	}{
		{"exits", "echo \"Error: Cannot find module 'redlock'\" >&2\nexit 1\n", `exit status 1); its stderr ends: Error: Cannot find module 'redlock'`},
		{"silent", "echo starting >&2\nsleep 60\n", "no hello within 300ms; its stderr ends: starting"},
		{"other protocol", "echo '{\"protocol\":2}'\nsleep 60\n", "the hello names protocol 2, want 1"},
		{"no hello", "echo 'ready'\nsleep 60\n", "the first line must be the hello"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Start(Config{Name: "fake", Command: fake(t, tt.body), StartTimeout: 300 * time.Millisecond})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				if c != nil {
					c.Close()
				}
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := Start(Config{Name: "fake", Command: []string{filepath.Join(t.TempDir(), "missing")}}); err == nil || !strings.Contains(err.Error(), "start adapter fake") {
		t.Errorf("missing executable: got %v, want a start error", err)
	}
}

// TestEnvironment: the adapter gets the nodes, the login and the TLS files
// in the protocol's variables, and no other REDLAB_* of this process.
func TestEnvironment(t *testing.T) {
	t.Setenv("REDLAB_CREDENTIALS", "/somewhere/else.json")
	out := filepath.Join(t.TempDir(), "env")
	body := "env | grep '^REDLAB_' | sort > " + out + "\n" + helloLine + "sleep 60\n"
	c, err := Start(Config{Name: "fake", Command: fake(t, body), StopTimeout: 100 * time.Millisecond,
		Nodes: nodeaddr.List{Addrs: []string{"127.0.0.1:7101", "127.0.0.1:7102"}, TLS: true}, TLSFiles: nodeaddr.TLSFiles{CA: "/tmp/ca.pem"},
		Username: "redlock", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Close of an adapter that ignores the end of its input: got %v, want it killed", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := "REDLAB_NODES=rediss://127.0.0.1:7101,rediss://127.0.0.1:7102\nREDLAB_PASSWORD=pw\nREDLAB_TLS_CA=/tmp/ca.pem\nREDLAB_USERNAME=redlock\n"
	if string(b) != want {
		t.Errorf("environment:\ngot  %q\nwant %q", b, want)
	}
}

// TestAdapterDiesWithTheLab: killed with SIGKILL, the process that started
// an adapter takes it along (Pdeathsig).
func TestAdapterDiesWithTheLab(t *testing.T) {
	script := fake(t, helloLine+"exec sleep 300\n")[1]
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+script)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || !proc.Alive(pid) {
		t.Fatalf("helper printed %q: want the pid of a live adapter", line)
	}
	cmd.Process.Kill()
	cmd.Wait()
	redlocktest.Eventually(t, 10*time.Second, "the adapter dies with its parent", func() bool { return !proc.Alive(pid) })
}

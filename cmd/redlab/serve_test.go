package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/etcdtest"
	"github.com/redlocklab/redlocklab/internal/pgtest"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// serveOutput is an io.Writer the test can read while the command writes.
type serveOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *serveOutput) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *serveOutput) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestServeFlags(t *testing.T) {
	t.Setenv("REDLAB_NODES", "")
	t.Setenv("REDLAB_ETCD", "")
	dir := t.TempDir()
	db := filepath.Join(dir, "never.db")
	store := "sqlite:" + db
	tests := []struct {
		name string
		args []string
		want int
		msg  string
	}{
		{"unknown guard", []string{"--guard", "mutex", "--store", store}, exitUsage, "unknown guard"},
		{"naive guard is not a service guard", []string{"--guard", "redlock-fenced-naive", "--store", store}, exitUsage, "unknown guard"},
		{"redlock needs nodes", []string{"--guard", "redlock", "--store", store}, exitUsage, "--nodes is required"},
		{"redis-single needs nodes", []string{"--guard", "redis-single", "--store", store}, exitUsage, "--nodes is required"},
		{"redsync needs nodes", []string{"--guard", "redsync", "--store", store}, exitUsage, "--nodes is required"},
		{"redlock-del is for comparisons only", []string{"--guard", "redlock-del", "--store", store, "--nodes", "127.0.0.1:1"}, exitUsage, "releases its lock with a plain DEL"},
		{"bad node", []string{"--nodes", "localhost", "--store", store}, exitUsage, "host:port"},
		{"etcd needs --etcd", []string{"--guard", "etcd", "--store", store}, exitUsage, "--etcd is required"},
		{"etcd-fenced needs --etcd", []string{"--guard", "etcd-fenced", "--store", store, "--nodes", "127.0.0.1:1"}, exitUsage, "--etcd is required"},
		{"bad etcd endpoint", []string{"--guard", "etcd", "--store", store, "--etcd", "127.0.0.1:2379"}, exitUsage, "want http://host:port"},
		{"etcd endpoint twice", []string{"--guard", "etcd", "--store", store, "--etcd", "http://127.0.0.1:2379,http://127.0.0.1:2379"}, exitUsage, "listed twice"},
		{"etcd TTL below etcd's minimum", []string{"--guard", "etcd", "--store", store, "--etcd", "http://127.0.0.1:2379", "--lock-ttl", "1s"}, exitUsage, "minimum lease TTL of 2s"},
		{"bad store", []string{"--guard", "none", "--store", "mysql://x"}, exitUsage, "--store"},
		{"bad listen", []string{"--guard", "none", "--store", store, "--listen", "8080"}, exitUsage, "--listen"},
		{"bad listen port", []string{"--guard", "none", "--store", store, "--listen", "127.0.0.1:70000"}, exitUsage, "--listen"},
		{"zero ttl", []string{"--guard", "none", "--store", store, "--lock-ttl", "0s"}, exitUsage, "--lock-ttl"},
		{"negative acquire timeout", []string{"--guard", "none", "--store", store, "--acquire-timeout", "-1s"}, exitUsage, "--acquire-timeout"},
		{"fault pause without hooks", []string{"--guard", "none", "--store", store, "--fault-pause", "1s", "--fault-fraction", "0.5"}, exitUsage, "--fault-hooks"},
		{"fault fraction out of range", []string{"--guard", "none", "--store", store, "--fault-hooks", "--fault-pause", "1s", "--fault-fraction", "2"}, exitUsage, "--fault-fraction"},
		{"fault pause too long", []string{"--guard", "none", "--store", store, "--fault-hooks", "--fault-pause", "1h", "--fault-fraction", "0.1"}, exitUsage, "--fault-pause"},
		{"fault pause alone", []string{"--guard", "none", "--store", store, "--fault-hooks", "--fault-pause", "1s"}, exitUsage, "go together"},
		{"sigstop without hooks", []string{"--guard", "none", "--store", store, "--fault-hooks-sigstop"}, exitUsage, "need --fault-hooks"},
		{"listen fd not inherited", []string{"--guard", "none", "--store", store, "--listen-fd", "2"}, exitUsage, "--listen-fd 2"},
		{"listen fd and listen", []string{"--guard", "none", "--store", store, "--listen-fd", "3", "--listen", "127.0.0.1:0"}, exitUsage, "no --listen"},
		{"extra argument", []string{"--guard", "none", "--store", store, "now"}, exitUsage, "unexpected arguments"},
		{"unknown flag", []string{"--colour"}, exitUsage, "unknown flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr serveOutput
			got := run(context.Background(), &env{stdout: &stdout, stderr: &stderr}, append([]string{"serve"}, tt.args...))
			if got != tt.want || !strings.Contains(stderr.String(), tt.msg) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", got, stderr.String(), tt.want, tt.msg)
			}
		})
	}
	// Validation comes before any side effect: no database was created.
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("%s exists after usage errors (stat: %v); flags must be checked before opening the store", db, err)
	}
}

// server is a `redlab serve` running in-process.
type server struct {
	base    string
	signals chan os.Signal
	done    chan struct{} // closed when run returned
	code    int           // run's exit code, once done is closed
	stderr  *serveOutput
}

var listeningRE = regexp.MustCompile(`listening on (http://\S+)`)

func startServe(t *testing.T, args ...string) *server {
	t.Helper()
	stdout, stderr := &serveOutput{}, &serveOutput{}
	s := &server{signals: make(chan os.Signal, 2), done: make(chan struct{}), stderr: stderr}
	go func() {
		defer close(s.done)
		s.code = run(context.Background(), &env{stdout: stdout, stderr: stderr, signals: s.signals},
			append([]string{"serve", "--listen", "127.0.0.1:0"}, args...))
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := listeningRE.FindStringSubmatch(stdout.String()); m != nil {
			s.base = m[1]
			break
		}
		select {
		case <-s.done:
			t.Fatalf("serve exited with %d before listening: %s", s.code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start listening: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			s.signals <- syscall.SIGTERM
			s.signals <- syscall.SIGTERM
			<-s.done
		}
	})
	return s
}

func (s *server) call(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

func (s *server) waitExit(t *testing.T) int {
	t.Helper()
	select {
	case <-s.done:
		return s.code
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not exit; stderr: %s", s.stderr.String())
		return -1
	}
}

// TestServeGracefulShutdown: a reservation paused inside its critical
// section when SIGTERM arrives completes with 201, its lock is released on
// every node, and serve exits 0.
func TestServeGracefulShutdown(t *testing.T) {
	cluster := redlocktest.Start(t, 3, redlocktest.Options{})
	db := "sqlite:" + filepath.Join(t.TempDir(), "inventory.db")
	// A node timeout well above a busy machine's stalls: the test is about
	// the drain, not about releases that time out (those are retried in the
	// background and bounded by Close).
	s := startServe(t, "--nodes", strings.Join(cluster.Addrs(), ","), "--store", db, "--guard", "redlock", "--fault-hooks", "--holder", "graceful",
		"--node-timeout", "2s")

	if code, body := s.call(t, "PUT", "/v1/stock/drain", `{"stock":5}`); code != 200 {
		t.Fatalf("seed: got %d %v", code, body)
	}
	if code, body := s.call(t, "GET", "/readyz", ""); code != 200 {
		t.Fatalf("readyz: got %d %v", code, body)
	}
	// The next reservation pauses for 2s inside its critical section.
	if code, body := s.call(t, "POST", "/v1/faults/pause", `{"duration":"2s","count":1}`); code != 200 {
		t.Fatalf("set pause: got %d %v", code, body)
	}
	type reply struct {
		code int
		body map[string]any
		err  error
	}
	replied := make(chan reply, 1)
	go func() { // no t.Fatal off the test goroutine: report through the channel
		resp, err := http.Post(s.base+"/v1/reservations", "application/json",
			strings.NewReader(`{"sku":"drain","quantity":2,"request_id":"in-flight"}`))
		if err != nil {
			replied <- reply{err: err}
			return
		}
		defer resp.Body.Close()
		var body map[string]any
		err = json.NewDecoder(resp.Body).Decode(&body)
		replied <- reply{resp.StatusCode, body, err}
	}()

	// The reservation holds its lock once the key is on a quorum of nodes
	// (the grant is decided at a quorum: any one node may not have it yet).
	key := "lock:sku:drain"
	holding := func() int {
		n := 0
		for _, node := range cluster.Nodes {
			n += int(node.Client().Exists(context.Background(), key).Val())
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for holding() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the reservation never took its lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.signals <- syscall.SIGTERM

	r := <-replied
	if r.err != nil || r.code != http.StatusCreated || r.body["holder"] != "graceful" {
		t.Errorf("in-flight reservation: got %d %v (%v), want 201", r.code, r.body, r.err)
	}
	if code := s.waitExit(t); code != exitOK {
		t.Errorf("exit: got %d, want 0; stderr: %s", code, s.stderr.String())
	}
	for i, n := range cluster.Nodes {
		if got := n.Client().Exists(context.Background(), key).Val(); got != 0 {
			t.Errorf("node %d still holds %s after the drain", i, key)
		}
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(s.base, "http://"), time.Second); err == nil {
		t.Error("still accepting connections after exit")
	}
	store, err := inventory.OpenStore(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	a, err := store.Audit(context.Background(), []string{"drain"}, map[string]int64{"drain": 5})
	if err != nil {
		t.Fatal(err)
	}
	if w := a.PerSKU["drain"]; w.Final != 3 || w.Reserved != 2 || a.LostUpdates != 0 {
		t.Errorf("audit: got %+v, want final 3, reserved 2, nothing lost", w)
	}
}

// TestServeSecondSignal: a second signal stops waiting for a paused request.
func TestServeSecondSignal(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "inventory.db")
	s := startServe(t, "--store", db, "--guard", "db-atomic", "--fault-hooks")
	s.call(t, "PUT", "/v1/stock/stuck", `{"stock":5}`)
	s.call(t, "POST", "/v1/faults/pause", `{"duration":"1s","count":1}`)
	replied := make(chan error, 1)
	go func() {
		resp, err := http.Post(s.base+"/v1/reservations", "application/json", strings.NewReader(`{"sku":"stuck","quantity":1,"request_id":"r"}`))
		if err == nil {
			resp.Body.Close()
		}
		replied <- err
	}()
	// Wait until the request is being handled: the pause rule is consumed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := s.call(t, "GET", "/v1/faults/pause", "")
		if next, _ := body["next"].(map[string]any); next["count"] == float64(0) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reservation never reached its pause")
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.signals <- syscall.SIGTERM
	s.signals <- syscall.SIGTERM
	if code := s.waitExit(t); code != exitFailure {
		t.Errorf("exit after two signals: got %d, want %d", code, exitFailure)
	}
	if err := <-replied; err == nil {
		t.Error("the paused request completed; want it cut off by the second signal")
	}
}

// TestServeWithoutLock: the guards that need no lock start without nodes,
// and /readyz says so.
func TestServeWithoutLock(t *testing.T) {
	t.Setenv("REDLAB_NODES", "")
	s := startServe(t, "--store", "sqlite:"+filepath.Join(t.TempDir(), "inventory.db"), "--guard", "none")
	if code, body := s.call(t, "GET", "/readyz", ""); code != 200 || body["lock"] != "none" {
		t.Errorf("readyz: got %d %v, want 200 with lock none", code, body)
	}
	if code, _ := s.call(t, "POST", "/v1/faults/pause", `{"duration":"1s"}`); code != 404 {
		t.Errorf("fault endpoint without --fault-hooks: got %d, want 404", code)
	}
	if code, _ := s.call(t, "GET", "/metrics", ""); code != 200 {
		t.Errorf("metrics: got %d, want 200", code)
	}
	s.signals <- syscall.SIGINT
	if code := s.waitExit(t); code != exitOK {
		t.Errorf("exit: got %d, want 0", code)
	}
}

// TestServeDBGuards: the guards that let the database decide start without
// lock nodes, on SQLite and on PostgreSQL, and reserve.
func TestServeDBGuards(t *testing.T) {
	t.Setenv("REDLAB_NODES", "")
	stores := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "inventory.db") },
		"postgres": func(t *testing.T) string { return pgtest.DSN(t) },
	}
	for _, g := range []inventory.Guard{inventory.GuardDBVersion, inventory.GuardDBForUpdate} {
		for _, store := range []string{"sqlite", "postgres"} {
			t.Run(string(g)+"/"+store, func(t *testing.T) {
				s := startServe(t, "--store", stores[store](t), "--guard", string(g))
				if code, body := s.call(t, "GET", "/readyz", ""); code != 200 || body["guard"] != string(g) || body["lock"] != "none" {
					t.Errorf("readyz: got %d %v, want 200, guard %s, lock none", code, body, g)
				}
				if code, body := s.call(t, "PUT", "/v1/stock/widget", `{"stock":5}`); code != 200 {
					t.Fatalf("PUT stock: got %d %v, want 200", code, body)
				}
				code, body := s.call(t, "POST", "/v1/reservations", `{"sku":"widget","quantity":2,"request_id":"serve-1"}`)
				timing, _ := body["timing"].(map[string]any)
				if code != 201 || body["guard"] != string(g) || timing["attempts"] != float64(1) || timing["conflicts"] != float64(0) {
					t.Errorf("reserve: got %d %v, want 201 through %s with 1 attempt, 0 conflicts", code, body, g)
				}
				if code, body := s.call(t, "GET", "/v1/stock/widget", ""); code != 200 || body["stock"] != float64(3) {
					t.Errorf("stock after the reservation: got %d %v, want 3", code, body)
				}
				s.signals <- syscall.SIGINT
				if code := s.waitExit(t); code != exitOK {
					t.Errorf("exit: got %d, want 0; stderr: %s", code, s.stderr.String())
				}
			})
		}
	}
}

// TestServeEtcd: `redlab serve --guard etcd` locks on a real etcd cluster
// named by --etcd, or by REDLAB_ETCD without the flag; /readyz reports its
// members, a reservation commits, and a signal drains and exits 0.
func TestServeEtcd(t *testing.T) {
	t.Setenv("REDLAB_NODES", "")
	cluster := etcdtest.Start(t, 1, etcdtest.Options{})
	for _, tt := range []struct {
		name, guard string
		flag        bool
	}{{"flag", "etcd", true}, {"env", "etcd-fenced", false}} {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"--store", "sqlite:" + filepath.Join(t.TempDir(), "inventory.db"), "--guard", tt.guard}
			if tt.flag {
				t.Setenv("REDLAB_ETCD", "")
				args = append(args, "--etcd", strings.Join(cluster.Endpoints(), ","))
			} else {
				t.Setenv("REDLAB_ETCD", strings.Join(cluster.Endpoints(), ","))
			}
			s := startServe(t, args...)
			code, body := s.call(t, "GET", "/readyz", "")
			nodes, _ := body["nodes"].(map[string]any)
			if code != 200 || body["lock"] != "ok" || nodes["up"] != float64(1) || nodes["quorum"] != float64(1) {
				t.Errorf("readyz: got %d %v, want 200, lock ok, 1 member up of quorum 1", code, body)
			}
			if code, body := s.call(t, "PUT", "/v1/stock/e", `{"stock":5}`); code != 200 {
				t.Fatalf("seed: got %d %v", code, body)
			}
			if code, body := s.call(t, "POST", "/v1/reservations", `{"sku":"e","quantity":2,"request_id":"e-1"}`); code != 201 || body["guard"] != tt.guard {
				t.Errorf("reserve: got %d %v, want 201 through %s", code, body, tt.guard)
			}
			if code, body := s.call(t, "GET", "/v1/stock/e", ""); code != 200 || body["stock"] != float64(3) {
				t.Errorf("stock after the reservation: got %d %v, want 3", code, body)
			}
			s.signals <- syscall.SIGTERM
			if code := s.waitExit(t); code != exitOK {
				t.Errorf("exit: got %d, want 0; stderr: %s", code, s.stderr.String())
			}
		})
	}
}

package drill

import (
	"context"
	"errors"
	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/proc"
	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// startTestProcs runs a guard's replicas as `redlab serve` processes, as
// a drill does, stopped at the end of the test.
func startTestProcs(t *testing.T, cfg serveConfig) (*serveProcs, *History) {
	t.Helper()
	dir := t.TempDir()
	cfg.Redlab, cfg.Dir, cfg.StateDir = testenv.Redlab(t), dir, dir
	cfg.StoreDSN = "sqlite:" + filepath.Join(dir, "inventory.db")
	hist := NewHistory(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := startServeProcs(ctx, cfg, hist, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.stop() })
	for _, p := range s.procs {
		if err := p.client.SetStock(ctx, "sku-1", 100); err != nil {
			t.Fatal(err)
		}
	}
	return s, hist
}

// pauseOf waits until the history has a process pause of s's guard and the
// process is stopped, and returns the pause's start.
func pauseOf(t *testing.T, s *serveProcs, p *serveProc, hist *History) FaultRecord {
	t.Helper()
	for i := 0; ; i++ {
		for _, f := range hist.Faults() {
			if f.Event == "start" && f.Scope == string(inventory.ScopeProcess) {
				if st, err := proc.State(p.cmd.Process.Pid); err == nil && st == 'T' {
					return f
				}
			}
		}
		if i == 3000 {
			t.Fatalf("%s never stopped: history %+v", p.holder, hist.Faults())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// healthz reports whether a process answers GET /healthz within a second.
func healthz(p *serveProc) bool {
	hc := &http.Client{Timeout: time.Second}
	resp, err := hc.Get(p.url + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// TestProcessPauseStopsTheProcess: a holder that reaches its critical
// section with a process pause armed stops its whole process. Its HTTP
// server does not answer /healthz until the SIGCONT, the other replica runs
// on, and the holds of both processes land in the history on the drill's
// clock.
func TestProcessPauseStopsTheProcess(t *testing.T) {
	cluster := redlocktest.Start(t, 3, redlocktest.Options{})
	s, hist := startTestProcs(t, serveConfig{Guard: inventory.GuardRedlock, Replicas: 2, Nodes: nodeaddr.List{Addrs: cluster.Addrs()}, LockTTL: 10 * time.Second})
	paused, other := s.procs[0], s.procs[1]
	ctx := context.Background()
	if err := s.Arm(ctx, 30*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var reserveErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, reserveErr = paused.client.Reserve(ctx, inventory.Request{SKU: "sku-1", Quantity: 1, RequestID: "paused-1"})
	}()
	start := pauseOf(t, s, paused, hist)
	if healthz(paused) {
		t.Errorf("%s answered /healthz while stopped", paused.holder)
	}
	if !healthz(other) {
		t.Errorf("%s did not answer /healthz while the other replica was stopped", other.holder)
	}
	// The other process's hold, bracketed by the drill's own clock.
	before := time.Now()
	if _, err := other.client.Reserve(ctx, inventory.Request{SKU: "sku-1", Quantity: 1, RequestID: "other-1"}); err == nil {
		t.Errorf("%s reserved the key whose lock the stopped process holds", other.holder)
	}
	if err := paused.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if reserveErr != nil {
		t.Errorf("the paused reservation after SIGCONT: %v", reserveErr)
	}
	if !healthz(paused) {
		t.Errorf("%s did not answer /healthz after SIGCONT", paused.holder)
	}
	if _, err := other.client.Reserve(ctx, inventory.Request{SKU: "sku-1", Quantity: 1, RequestID: "other-2"}); err != nil {
		t.Errorf("%s after the pause: %v", other.holder, err)
	}
	after := time.Now()
	if err := s.stop(); err != nil {
		t.Errorf("stop: %v", err)
	}

	holds := hist.Holds()
	if len(holds) != 2 {
		t.Fatalf("history: got %d holds, want the paused one and the other's: %+v", len(holds), holds)
	}
	h0, h1 := holds[0], holds[1]
	if h0.Holder != paused.holder || h1.Holder != other.holder {
		t.Errorf("holders: got %s then %s, want %s then %s", h0.Holder, h1.Holder, paused.holder, other.holder)
	}
	if !(h0.GrantedNs <= start.AtNs && start.AtNs < h0.ReleasedNs) {
		t.Errorf("the paused hold [%d, %d) does not contain the pause's start %d", h0.GrantedNs, h0.ReleasedNs, start.AtNs)
	}
	// The other process's clock readings fall between the drill's: one
	// clock across processes.
	if b, a := hist.ns(before), hist.ns(after); !(b <= h1.GrantedNs && h1.ReleasedNs <= a) {
		t.Errorf("%s's hold [%d, %d) is not within the drill's [%d, %d]", other.holder, h1.GrantedNs, h1.ReleasedNs, b, a)
	}
	if h1.GrantedNs < h0.ReleasedNs {
		t.Errorf("%s was granted at %d, before the paused holder released at %d", other.holder, h1.GrantedNs, h0.ReleasedNs)
	}
	var ends int
	for _, f := range hist.Faults() {
		if f.ID == start.ID && f.Event == "end" && f.Scope == string(inventory.ScopeProcess) {
			ends++
		}
	}
	if ends != 1 {
		t.Errorf("history: got %d ends of pause %s, want 1: %+v", ends, start.ID, hist.Faults())
	}
}

// TestServeProcsStopWhilePaused: stopping the processes while one is
// stopped by a pause (an aborted drill) wakes it, and every process is
// gone when stop returns.
func TestServeProcsStopWhilePaused(t *testing.T) {
	s, hist := startTestProcs(t, serveConfig{Guard: inventory.GuardDBAtomic, Replicas: 2})
	ctx := context.Background()
	if err := s.Arm(ctx, 30*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The answer does not matter: the process drains or is killed.
		_, _ = s.procs[0].client.Reserve(ctx, inventory.Request{SKU: "sku-1", Quantity: 1, RequestID: "paused-1"})
	}()
	pauseOf(t, s, s.procs[0], hist)
	if err := s.stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	wg.Wait()
	for _, p := range s.procs {
		if err := syscall.Kill(p.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) after stop: kill 0 gives %v, want ESRCH", p.holder, p.cmd.Process.Pid, err)
		}
	}
	var ended bool
	for _, f := range hist.Faults() {
		ended = ended || (f.Event == "end" && f.Scope == string(inventory.ScopeProcess))
	}
	if !ended {
		t.Errorf("history has no end of the pause: %+v", hist.Faults())
	}
}

// serveChildren lists the pids of this process's `redlab serve` children.
func serveChildren(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(stat), ')')
		f := strings.Fields(string(stat[i+1:]))
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) && strings.Contains(string(cmdline), "--drill-events") {
			out = append(out, pid)
		}
	}
	return out
}

// TestServeArgsTLS: a TLS lab's serve processes get its nodes as rediss://
// and its CA.
func TestServeArgsTLS(t *testing.T) {
	cfg := serveConfig{Guard: inventory.GuardRedlock, Nodes: nodeaddr.List{Addrs: []string{"127.0.0.1:7101", "127.0.0.1:7102"}, TLS: true}, TLSCA: "/tmp/lab/tls/ca.crt"}
	got := strings.Join(serveArgs(cfg, 0), " ")
	for _, want := range []string{"--nodes rediss://127.0.0.1:7101,rediss://127.0.0.1:7102", "--tls-ca /tmp/lab/tls/ca.crt"} {
		if !strings.Contains(got, want) {
			t.Errorf("serve argv %q lacks %q", got, want)
		}
	}
	cfg.Nodes.TLS, cfg.TLSCA = false, ""
	if got := strings.Join(serveArgs(cfg, 0), " "); !strings.Contains(got, "--nodes 127.0.0.1:7101,127.0.0.1:7102") || strings.Contains(got, "tls") {
		t.Errorf("plain lab: serve argv %q, want plain nodes and no TLS flag", got)
	}
}

package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/inventory"
)

// serveInventory runs what `redlab serve` runs, in process: the inventory
// API over a real store, behind wrap, on a real listener. It returns the
// base URL and the server, closed at cleanup.
func serveInventory(t *testing.T, dsn string, wrap func(http.Handler) http.Handler) (string, *http.Server) {
	t.Helper()
	r, err := inventory.OpenReplica(context.Background(), inventory.ReplicaConfig{StoreDSN: dsn, Guard: inventory.GuardDBAtomic, Holder: "server"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	h, err := inventory.NewHandler(r.Service(), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := inventory.NewServer("", wrap(h))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	return "http://" + ln.Addr().String(), srv
}

// faultyConns fails reservations by their operation number, the way a
// process killed mid-request and the proxies in front of a service do:
// after reading the request, it resets the connection before (1) or after
// (2) the service committed; it answers as a proxy would, 502 (3) or 429
// (4); the rest (0, 5) go through.
func faultyConns(kind func(seq uint64) int) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var req struct {
				RequestID string `json:"request_id"`
			}
			_ = json.Unmarshal(body, &req)
			seq, err := strconv.ParseUint(req.RequestID[strings.LastIndexByte(req.RequestID, '-')+1:], 10, 64)
			if r.URL.Path != "/v1/reservations" || err != nil {
				next.ServeHTTP(w, r)
				return
			}
			reset := func() {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					panic(err)
				}
				conn.(*net.TCPConn).SetLinger(0) // RST, as a killed process's kernel sends
				conn.Close()
			}
			switch kind(seq) {
			case 1:
				reset()
			case 2:
				next.ServeHTTP(httptest.NewRecorder(), r) // commits; the answer is lost
				reset()
			case 3:
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(http.StatusBadGateway)
				io.WriteString(w, "<html><body>502 Bad Gateway</body></html>")
			case 4:
				w.WriteHeader(http.StatusTooManyRequests)
			default:
				next.ServeHTTP(w, r)
			}
		})
	}
}

// A run against two instances, one of which is gone before the run starts:
// its requests are refused, never sent; on the other, requests whose
// connection is reset after sending are unknown, and the store audit finds
// which of them committed; answers that are not the API's count by class.
func TestHTTPTargetOutcomes(t *testing.T) {
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "inventory.db")
	// Even operations go to a (round-robin over two URLs); its faults cycle
	// with the operation number.
	a, _ := serveInventory(t, dsn, faultyConns(func(seq uint64) int { return int(seq/2) % 6 }))
	b, bsrv := serveInventory(t, dsn, func(h http.Handler) http.Handler { return h })
	target, err := NewHTTPTarget(ctx, HTTPConfig{URLs: []string{a, b}, StoreDSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Close() })
	bsrv.Close() // b is gone: its requests are refused
	// A keep-alive connection to b from the readiness check could carry the
	// first request before the client saw it close; that request would be
	// unknown, rightly, but not what this test counts.
	target.hc.CloseIdleConnections()

	sched, _ := ConstantSchedule(100, 600*time.Millisecond, Shard{})
	ks, _ := ParseKeys("uniform:2")
	kg, _ := NewKeyGen(ks, Shard{})
	dir := filepath.Join(t.TempDir(), "run")
	r, _, err := Execute(ctx, RunSpec{Out: dir, Stock: 1000, Meta: Meta{Target: "http", Keys: "uniform:2", Stages: "600ms:100"},
		Engine: Config{Schedule: sched, Target: target, Keys: kg, Seed: 1, Interval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Summary
	// 60 operations: 30 odd ones to b, refused; 30 even ones to a, five of
	// each fault and ten through.
	want := map[string]int64{"reserved": 10, "refused": 30, "unknown": 10, "http_5xx": 5, "http_4xx": 5, "error": 0, "late": 0}
	for name, n := range want {
		if s.Outcomes[name] != n {
			t.Errorf("outcome %s: got %d, want %d (all: %v)", name, s.Outcomes[name], n, s.Outcomes)
		}
	}
	sf := s.Safety
	if !sf.AuditChecked || sf.UnknownCommitted != 5 || sf.UnknownNotCommitted != 5 || sf.LostUpdates != 0 {
		t.Errorf("safety: got %+v, want the audit to find 5 of the 10 unknown committed, 5 not, nothing lost", sf)
	}
	var ledger int64
	for _, sku := range kg.Names() {
		n, err := target.store.Stock(ctx, sku)
		if err != nil {
			t.Fatal(err)
		}
		ledger += 1000 - n
	}
	if ledger != 15 {
		t.Errorf("units taken from the store: got %d, want 15 (10 reserved, 5 committed without an answer)", ledger)
	}

	// The reports say so, and thresholds can hold a run to it.
	failed := r.Judge([]Threshold{mustThreshold(t, "outcomes.refused<1%"), mustThreshold(t, "outcomes.unknown==10"), mustThreshold(t, "outcomes.http_5xx<=5")})
	if len(failed) != 1 || failed[0].Expr != "outcomes.refused<1%" || failed[0].Got != "50.000%" {
		t.Errorf("thresholds: failed %+v, want only outcomes.refused<1%% (got 50.000%%)", failed)
	}
	var txt strings.Builder
	if err := r.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"refused 30", "unknown 10", "http_4xx 5", "http_5xx 5", "unknown outcomes: 10 sent and never answered; the ledger has 5 of them committed, 5 not"} {
		if !strings.Contains(txt.String(), line) {
			t.Errorf("summary.txt lacks %q:\n%s", line, txt.String())
		}
	}
	if err := r.Write(); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, HTMLFile))
	if !strings.Contains(string(page), "the ledger has 5 of them committed, 5 not") || !strings.Contains(string(page), "<th>refused</th>") {
		t.Errorf("report.html lacks the refused column or the unknown outcomes' audit")
	}
	var sum Summary
	if err := readJSON(filepath.Join(dir, SummaryFile), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Outcomes["refused"] != 30 || sum.Safety.UnknownCommitted != 5 {
		t.Errorf("summary.json: outcomes %v, safety %+v", sum.Outcomes, sum.Safety)
	}
}

// Without a store the unknown outcomes are counted but cannot be audited.
func TestHTTPTargetUnknownWithoutStore(t *testing.T) {
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "inventory.db")
	a, _ := serveInventory(t, dsn, faultyConns(func(seq uint64) int {
		if seq%2 == 1 {
			return 2
		}
		return 0
	}))
	target, err := NewHTTPTarget(ctx, HTTPConfig{URLs: []string{a}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Close() })
	sched, _ := ConstantSchedule(100, 200*time.Millisecond, Shard{})
	ks, _ := ParseKeys("uniform:1")
	kg, _ := NewKeyGen(ks, Shard{})
	r, _, err := Execute(ctx, RunSpec{Out: filepath.Join(t.TempDir(), "run"), Stock: 100, Meta: Meta{Target: "http", Keys: "uniform:1", Stages: "200ms:100"},
		Engine: Config{Schedule: sched, Target: target, Keys: kg, Seed: 1, Interval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Summary
	if s.Outcomes["unknown"] != 10 || s.Outcomes["reserved"] != 10 || s.Safety.AuditChecked || s.Safety.UnknownCommitted+s.Safety.UnknownNotCommitted != 0 {
		t.Errorf("outcomes %v, safety %+v; want 10 unknown, 10 reserved, no audit", s.Outcomes, s.Safety)
	}
	var txt strings.Builder
	if err := r.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt.String(), "unknown outcomes: 10 sent and never answered, not audited") {
		t.Errorf("summary.txt:\n%s", txt.String())
	}
}

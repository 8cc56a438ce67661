package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

// apiResponse is a decoded response.
type apiResponse struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (r apiResponse) code() string {
	if e, ok := r.body["error"].(map[string]any); ok {
		c, _ := e["code"].(string)
		return c
	}
	return ""
}

func do(t *testing.T, h http.Handler, method, path, contentType, body string) apiResponse {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := apiResponse{status: rec.Code, header: rec.Header(), raw: rec.Body.String()}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(rec.Body.Bytes(), &res.body); err != nil {
			t.Fatalf("%s %s: response is not JSON: %v: %q", method, path, err, res.raw)
		}
	}
	return res
}

const jsonCT = "application/json"

// newAPI returns a db-atomic service's handler over a fresh SQLite store,
// with the SKU "widget" seeded to 5.
func newAPI(t *testing.T, opts ...HandlerOption) (http.Handler, *Service, *prometheus.Registry) {
	t.Helper()
	store := openStore(t, "sqlite:"+t.TempDir()+"/inv.db")
	seed(t, store, "widget", 5)
	svc := replica(t, store, GuardDBAtomic, nil, WithHolder("api"))
	reg := prometheus.NewRegistry()
	opts = append([]HandlerOption{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	return newTestHandler(t, svc, reg, opts...), svc, reg
}

// TestBadInput: every class of bad input gets a 4xx with a JSON error and a
// stable code, never a 500.
func TestBadInput(t *testing.T) {
	h, _, _ := newAPI(t)
	huge := `{"sku":"widget","quantity":1,"request_id":"` + strings.Repeat("x", MaxBodyBytes) + `"}`
	tests := []struct {
		name, method, path, ct, body string
		status                       int
		code                         string
	}{
		{"no content type", "POST", "/v1/reservations", "", `{"sku":"widget","quantity":1,"request_id":"r"}`, 415, "unsupported_media_type"},
		{"text/plain", "POST", "/v1/reservations", "text/plain", `{"sku":"widget","quantity":1,"request_id":"r"}`, 415, "unsupported_media_type"},
		{"bad charset", "POST", "/v1/reservations", "application/json; charset=latin1", `{}`, 415, "unsupported_media_type"},
		{"garbage content type", "POST", "/v1/reservations", ";;;", `{}`, 415, "unsupported_media_type"},
		{"empty body", "POST", "/v1/reservations", jsonCT, ``, 400, "invalid_json"},
		{"whitespace body", "POST", "/v1/reservations", jsonCT, " \n ", 400, "invalid_json"},
		{"truncated", "POST", "/v1/reservations", jsonCT, `{"sku":`, 400, "invalid_json"},
		{"array", "POST", "/v1/reservations", jsonCT, `[1,2]`, 400, "invalid_json"},
		{"null", "POST", "/v1/reservations", jsonCT, `null`, 400, "invalid_json"},
		{"string", "POST", "/v1/reservations", jsonCT, `"hi"`, 400, "invalid_json"},
		{"trailing object", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1,"request_id":"r"} {}`, 400, "invalid_json"},
		{"trailing garbage", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1,"request_id":"r"}x`, 400, "invalid_json"},
		{"too large", "POST", "/v1/reservations", jsonCT, huge, 413, "body_too_large"},
		{"unknown field", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1,"request_id":"r","price":3}`, 400, "unknown_field"},
		{"field case differs", "POST", "/v1/reservations", jsonCT, `{"SKU":"widget","quantity":1,"request_id":"r"}`, 400, "unknown_field"},
		{"missing sku", "POST", "/v1/reservations", jsonCT, `{"quantity":1,"request_id":"r"}`, 400, "invalid_sku"},
		{"null sku", "POST", "/v1/reservations", jsonCT, `{"sku":null,"quantity":1,"request_id":"r"}`, 400, "invalid_sku"},
		{"numeric sku", "POST", "/v1/reservations", jsonCT, `{"sku":12,"quantity":1,"request_id":"r"}`, 400, "invalid_sku"},
		{"empty sku", "POST", "/v1/reservations", jsonCT, `{"sku":"","quantity":1,"request_id":"r"}`, 400, "invalid_sku"},
		{"long sku", "POST", "/v1/reservations", jsonCT, `{"sku":"` + strings.Repeat("s", 65) + `","quantity":1,"request_id":"r"}`, 400, "invalid_sku"},
		{"sku with space", "POST", "/v1/reservations", jsonCT, `{"sku":"a b","quantity":1,"request_id":"r"}`, 400, "invalid_sku"},
		{"sku unicode", "POST", "/v1/reservations", jsonCT, `{"sku":"\u00e9","quantity":1,"request_id":"r"}`, 400, "invalid_sku"},
		{"missing quantity", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","request_id":"r"}`, 400, "invalid_quantity"},
		{"zero quantity", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":0,"request_id":"r"}`, 400, "invalid_quantity"},
		{"negative quantity", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":-1,"request_id":"r"}`, 400, "invalid_quantity"},
		{"quantity over max", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1000001,"request_id":"r"}`, 400, "invalid_quantity"},
		{"quantity overflows int64", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":99999999999999999999,"request_id":"r"}`, 400, "invalid_quantity"},
		{"fractional quantity", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1.5,"request_id":"r"}`, 400, "invalid_quantity"},
		{"exponent quantity", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1e3,"request_id":"r"}`, 400, "invalid_quantity"},
		{"string quantity", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":"5","request_id":"r"}`, 400, "invalid_quantity"},
		{"missing request id", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1}`, 400, "invalid_request_id"},
		{"empty request id", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1,"request_id":""}`, 400, "invalid_request_id"},
		{"long request id", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1,"request_id":"` + strings.Repeat("r", 129) + `"}`, 400, "invalid_request_id"},
		{"request id with space", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1,"request_id":"a b"}`, 400, "invalid_request_id"},
		{"unknown sku", "POST", "/v1/reservations", jsonCT, `{"sku":"nope","quantity":1,"request_id":"r-unknown"}`, 404, "sku_not_found"},
		{"out of stock", "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":6,"request_id":"r-oos"}`, 409, "out_of_stock"},
		{"wrong method", "GET", "/v1/reservations", "", ``, 405, "method_not_allowed"},
		{"wrong method on stock", "DELETE", "/v1/stock/widget", "", ``, 405, "method_not_allowed"},
		{"unknown route", "GET", "/v2/anything", "", ``, 404, "not_found"},
		{"nested stock path", "GET", "/v1/stock/a/b", "", ``, 404, "not_found"},
		{"faults not enabled", "POST", "/v1/faults/pause", jsonCT, `{"duration":"1s"}`, 404, "not_found"},
		{"unknown sku stock", "GET", "/v1/stock/nope", "", ``, 404, "sku_not_found"},
		{"bad sku stock", "GET", "/v1/stock/bad%20sku", "", ``, 400, "invalid_sku"},
		{"no sku in the stock path", "GET", "/v1/stock/", "", ``, 404, "not_found"},
		{"unclean path", "POST", "/v1//reservations", jsonCT, `{"sku":"widget","quantity":1,"request_id":"r-unclean"}`, 404, "not_found"},
		{"trailing slash", "POST", "/v1/reservations/", jsonCT, `{"sku":"widget","quantity":1,"request_id":"r-slash"}`, 404, "not_found"},
		{"negative stock", "PUT", "/v1/stock/widget", jsonCT, `{"stock":-1}`, 400, "invalid_stock"},
		{"stock too big", "PUT", "/v1/stock/widget", jsonCT, `{"stock":1000000000001}`, 400, "invalid_stock"},
		{"stock not a number", "PUT", "/v1/stock/widget", jsonCT, `{"stock":"5"}`, 400, "invalid_stock"},
		{"stock unknown field", "PUT", "/v1/stock/widget", jsonCT, `{"stock":5,"sku":"x"}`, 400, "unknown_field"},
		{"stock wrong content type", "PUT", "/v1/stock/widget", "text/csv", `5`, 415, "unsupported_media_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := do(t, h, tt.method, tt.path, tt.ct, tt.body)
			if res.status != tt.status || res.code() != tt.code {
				t.Errorf("got %d %q, want %d %q (body %s)", res.status, res.code(), tt.status, tt.code, res.raw)
			}
			if ct := res.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type: got %q, want application/json", ct)
			}
		})
	}
	if a := do(t, h, "GET", "/v1/stock/widget", "", ""); a.body["stock"] != float64(5) {
		t.Errorf("stock after only bad requests: got %v, want 5", a.body["stock"])
	}
}

func TestMethodNotAllowedListsAllow(t *testing.T) {
	h, _, _ := newAPI(t)
	for path, want := range map[string]string{
		"/v1/reservations": "POST",
		"/v1/stock/widget": "GET, HEAD, PUT",
		"/healthz":         "GET, HEAD",
	} {
		res := do(t, h, "PATCH", path, "", "")
		if res.status != 405 || res.header.Get("Allow") != want {
			t.Errorf("PATCH %s: got %d, Allow %q; want 405, %q", path, res.status, res.header.Get("Allow"), want)
		}
	}
}

var serverTimingRE = regexp.MustCompile(`^acquire;dur=\d+\.\d{3}, hold;dur=\d+\.\d{3}, release;dur=\d+\.\d{3}, attempts;desc="(\d+)", conflicts;desc="(\d+)"$`)

func TestReserveHTTP(t *testing.T) {
	h, svc, _ := newAPI(t)
	res := do(t, h, "PUT", "/v1/stock/gadget", jsonCT, `{"stock": 10}`)
	if res.status != 200 || res.body["stock"] != float64(10) || res.body["sku"] != "gadget" {
		t.Fatalf("PUT stock: got %d %s", res.status, res.raw)
	}
	body := `{"sku":"gadget","quantity":3,"request_id":"order-1"}`
	res = do(t, h, "POST", "/v1/reservations", "application/json; charset=utf-8", body)
	if res.status != 201 || res.body["replayed"] != false || res.body["quantity"] != float64(3) || res.body["guard"] != "db-atomic" || res.body["holder"] != "api" {
		t.Fatalf("POST: got %d %s, want 201 with the reservation", res.status, res.raw)
	}
	if st := res.header.Get("Server-Timing"); !serverTimingRE.MatchString(st) {
		t.Errorf("Server-Timing: got %q, want %s", st, serverTimingRE)
	}
	id := res.body["id"]

	res = do(t, h, "POST", "/v1/reservations", jsonCT, body)
	if res.status != 200 || res.body["replayed"] != true || res.body["id"] != id {
		t.Errorf("replay: got %d %s, want 200 with replayed=true and id %v", res.status, res.raw, id)
	}
	res = do(t, h, "POST", "/v1/reservations", jsonCT, `{"sku":"gadget","quantity":4,"request_id":"order-1"}`)
	if res.status != 422 || res.code() != "request_id_reused" {
		t.Errorf("reused id: got %d %s, want 422 request_id_reused", res.status, res.raw)
	}
	res = do(t, h, "GET", "/v1/stock/gadget", "", "")
	if res.status != 200 || res.body["stock"] != float64(7) {
		t.Errorf("GET stock: got %d %s, want 200 with stock 7", res.status, res.raw)
	}
	if n, _ := svc.Store().Stock(context.Background(), "gadget"); n != 7 {
		t.Errorf("store stock: got %d, want 7", n)
	}
	if res := do(t, h, "HEAD", "/v1/stock/gadget", "", ""); res.status != 200 {
		t.Errorf("HEAD stock: got %d, want 200", res.status)
	}
	if res := do(t, h, "GET", "/healthz", "", ""); res.status != 200 || res.body["status"] != "ok" {
		t.Errorf("healthz: got %d %s", res.status, res.raw)
	}
	if res := do(t, h, "GET", "/readyz", "", ""); res.status != 200 || res.body["status"] != "ready" || res.body["lock"] != "none" {
		t.Errorf("readyz: got %d %s, want 200 ready without a lock", res.status, res.raw)
	}
}

// TestLockErrorsHTTP: 503 with Retry-After, "contended" and "unavailable"
// told apart, and the Server-Timing of the failed acquire.
func TestLockErrorsHTTP(t *testing.T) {
	cluster := startRedis(t, 3)
	store := openStore(t, "sqlite:"+t.TempDir()+"/inv.db")
	seed(t, store, "held", 5)
	ctx := context.Background()
	for _, n := range cluster.Nodes {
		if err := n.Client().Set(ctx, lockKey("held"), "someone-else", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	svc := replica(t, store, GuardRedlock, cluster, WithAcquireTimeout(150*time.Millisecond))
	h := newTestHandler(t, svc, nil)
	res := do(t, h, "POST", "/v1/reservations", jsonCT, `{"sku":"held","quantity":1,"request_id":"c1"}`)
	if res.status != 503 || res.code() != "contended" || res.header.Get("Retry-After") != "1" {
		t.Errorf("contended: got %d %q Retry-After %q, want 503 contended with Retry-After 1", res.status, res.code(), res.header.Get("Retry-After"))
	}
	if m := serverTimingRE.FindStringSubmatch(res.header.Get("Server-Timing")); m == nil || m[1] == "0" {
		t.Errorf("Server-Timing of a contended acquire: got %q, want attempts >= 1", res.header.Get("Server-Timing"))
	}
	if res := do(t, h, "GET", "/metrics", "", ""); res.status != 404 {
		t.Errorf("/metrics without a registry: got %d, want 404", res.status)
	}

	cluster.Nodes[0].Kill()
	cluster.Nodes[1].Kill()
	res = do(t, h, "POST", "/v1/reservations", jsonCT, `{"sku":"held","quantity":1,"request_id":"u1"}`)
	if res.status != 503 || res.code() != "unavailable" || res.header.Get("Retry-After") == "" {
		t.Errorf("unavailable: got %d %q Retry-After %q, want 503 unavailable with Retry-After", res.status, res.code(), res.header.Get("Retry-After"))
	}
	res = do(t, h, "GET", "/readyz", "", "")
	nodes, _ := res.body["nodes"].(map[string]any)
	if res.status != 503 || res.code() != "not_ready" || res.body["store"] != "ok" || nodes["up"] != float64(1) || nodes["quorum"] != float64(2) {
		t.Errorf("readyz with 2 of 3 nodes down: got %d %s, want 503 not_ready, store ok, 1 up of quorum 2", res.status, res.raw)
	}
}

func TestMetrics(t *testing.T) {
	h, _, reg := newAPI(t)
	do(t, h, "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1,"request_id":"m1"}`)
	do(t, h, "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1,"request_id":"m1"}`)
	do(t, h, "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":100,"request_id":"m2"}`)
	do(t, h, "POST", "/v1/reservations", jsonCT, `{"sku":"widget"}`)
	do(t, h, "GET", "/nowhere", "", "")

	m := h.(*handler).m
	for outcome, want := range map[string]float64{outcomeReserved: 1, outcomeReplayed: 1, outcomeOutOfStock: 1, outcomeInvalid: 1} {
		if got := testutil.ToFloat64(m.reservations.WithLabelValues("db-atomic", outcome)); got != want {
			t.Errorf("reservations_total{outcome=%q}: got %v, want %v", outcome, got, want)
		}
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("unknown", "404")); got != 1 {
		t.Errorf(`http_requests_total{route="unknown",code="404"}: got %v, want 1`, got)
	}
	for name, c := range map[string]prometheus.Collector{
		"reservations": m.reservations, "duration": m.duration, "acquire": m.acquire,
		"fenced": m.fencedRejections, "requests": m.requests,
	} {
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatalf("lint %s: %v", name, err)
		}
		for _, p := range problems {
			t.Errorf("lint %s: %s: %s", name, p.Metric, p.Text)
		}
	}
	res := do(t, h, "GET", "/metrics", "", "")
	if res.status != 200 || !strings.Contains(res.raw, `redlab_inventory_reservations_total{guard="db-atomic",outcome="reserved"} 1`) {
		t.Errorf("/metrics: got %d, want the reservations counter in:\n%s", res.status, res.raw)
	}
	// A second handler on the same registry shares the collectors.
	h2 := newTestHandler(t, h.(*handler).svc, reg)
	do(t, h2, "POST", "/v1/reservations", jsonCT, `{"sku":"widget","quantity":1,"request_id":"m3"}`)
	if got := testutil.ToFloat64(m.reservations.WithLabelValues("db-atomic", outcomeReserved)); got != 2 {
		t.Errorf("shared registry: got %v reserved, want 2", got)
	}
}

func TestFaultEndpoints(t *testing.T) {
	f := NewFaults()
	h, _, _ := newAPI(t, WithFaults(f))
	tests := []struct {
		method, body string
		status       int
		code         string
	}{
		{"POST", `{"duration":"1s","count":2}`, 200, ""},
		{"POST", `{"duration":"50ms","fraction":0.25}`, 200, ""},
		{"POST", `{"duration":"1s"}`, 200, ""},
		{"POST", `{"duration":"1s","count":1,"fraction":0.5}`, 400, "invalid_fault"},
		{"POST", `{"duration":"forever"}`, 400, "invalid_fault"},
		{"POST", `{"duration":"31s"}`, 400, "invalid_fault"},
		{"POST", `{"duration":"1s","fraction":2}`, 400, "invalid_fault"},
		{"POST", `{"duration":"1s","count":-1}`, 400, "invalid_fault"},
		{"POST", `{"count":1}`, 400, "invalid_fault"},
		{"POST", `{"duration":"1s","when":"now"}`, 400, "unknown_field"},
		{"POST", `{"duration":"1s","count":1,"scope":"thread"}`, 400, "invalid_fault"},
		{"POST", `{"duration":"1s","fraction":0.5,"scope":"request"}`, 400, "invalid_fault"},
		// Process scope needs EnableProcessStop (serve --fault-hooks-sigstop).
		{"POST", `{"duration":"1s","count":1,"scope":"process"}`, 400, "invalid_fault"},
		{"POST", `{"duration":"1s","count":1,"scope":"request"}`, 200, ""},
	}
	for _, tt := range tests {
		res := do(t, h, tt.method, "/v1/faults/pause", jsonCT, tt.body)
		if res.status != tt.status || res.code() != tt.code {
			t.Errorf("%s %s: got %d %q, want %d %q", tt.method, tt.body, res.status, res.code(), tt.status, tt.code)
		}
	}
	st := f.State()
	if st.Next.Count != 1 || st.Next.Duration != time.Second || st.Random.Fraction != 0.25 || st.Random.Duration != 50*time.Millisecond {
		t.Errorf("state: got %+v, want next 1×1s and random 25%%×50ms", st)
	}
	res := do(t, h, "GET", "/v1/faults/pause", "", "")
	next, _ := res.body["next"].(map[string]any)
	if res.status != 200 || next["count"] != float64(1) || next["duration"] != "1s" {
		t.Errorf("GET faults: got %d %s", res.status, res.raw)
	}
	if res := do(t, h, "DELETE", "/v1/faults/pause", "", ""); res.status != 200 || f.State() != (FaultState{}) {
		t.Errorf("DELETE faults: got %d, state %+v; want 200 and every rule off", res.status, f.State())
	}
	// On command: exactly the next count requests pause.
	if err := f.PauseNext(time.Millisecond, 2, ""); err != nil {
		t.Fatal(err)
	}
	var paused int
	for i := 0; i < 5; i++ {
		if d, scope := f.take(); d > 0 && scope == ScopeRequest {
			paused++
		}
	}
	if paused != 2 {
		t.Errorf("PauseNext(1ms, 2): got %d of 5 requests paused, want 2", paused)
	}
	if err := f.SetRandom(time.Millisecond, 1); err != nil {
		t.Fatal(err)
	}
	if d, scope := f.take(); d != time.Millisecond || scope != ScopeRequest {
		t.Errorf("SetRandom(1ms, 1): got a %v pause with scope %q, want 1ms with scope request", d, scope)
	}
	f.Clear()
	f.EnableProcessStop(func(ProcessPause) {})
	if err := f.PauseNext(time.Second, 1, ScopeProcess); err != nil {
		t.Fatal(err)
	}
	if d, scope := f.take(); d != time.Second || scope != ScopeProcess {
		t.Errorf("PauseNext(1s, 1, process): got a %v pause with scope %q, want 1s with scope process", d, scope)
	}
}

// TestGracefulShutdown: a reservation parked inside its critical section
// when shutdown starts still completes with 201, and its lock is released.
func TestGracefulShutdown(t *testing.T) {
	cluster := startRedis(t, 3)
	store := openStore(t, "sqlite:"+t.TempDir()+"/inv.db")
	seed(t, store, "slow", 5)
	g := newGate(t)
	svc := replica(t, store, GuardRedlock, cluster, WithPauseHook(g.hook)) // default TTL: 10s
	srv := NewServer("", newTestHandler(t, svc, prometheus.NewRegistry()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()

	step := g.block("in-flight")
	type reply struct {
		status int
		err    error
	}
	replied := make(chan reply, 1)
	go func() {
		resp, err := http.Post(base+"/v1/reservations", jsonCT, strings.NewReader(`{"sku":"slow","quantity":2,"request_id":"in-flight"}`))
		if err != nil {
			replied <- reply{err: err}
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		replied <- reply{status: resp.StatusCode}
	}()
	step.wait(t, "the in-flight reservation", nil)
	key := lockKey("slow")
	if n := countKey(t, cluster.Nodes[0].Client(), key); n != 1 {
		t.Fatalf("lock key while the reservation is parked: got %d, want 1", n)
	}

	shutdown := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shutdown <- srv.Shutdown(ctx)
	}()
	// Shutdown closes the listener first: wait until new connections fail.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if i > 1000 {
			t.Fatal("listener still accepting after Shutdown")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned (%v) while a reservation was in flight", err)
	default:
	}
	step.let()
	if r := <-replied; r.err != nil || r.status != http.StatusCreated {
		t.Errorf("in-flight reservation: got %d, %v; want 201", r.status, r.err)
	}
	if err := <-shutdown; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: got %v, want http.ErrServerClosed", err)
	}
	for i, n := range cluster.Nodes {
		if got := countKey(t, n.Client(), key); got != 0 {
			t.Errorf("node %d still has %s after shutdown: the lock was not released", i, key)
		}
	}
	if a := audit(t, store, "slow", 5); a.Final != 3 || a.Drift != 0 {
		t.Errorf("audit: got %+v, want final 3, drift 0", a)
	}
}

func countKey(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	n, err := c.Exists(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("EXISTS %s: %v", key, err)
	}
	return n
}

func TestServerTimingFormat(t *testing.T) {
	got := serverTiming(Timing{Acquire: 1234567 * time.Nanosecond, Hold: 2 * time.Millisecond, Release: 500 * time.Microsecond, Attempts: 2, Conflicts: 1})
	want := `acquire;dur=1.235, hold;dur=2.000, release;dur=0.500, attempts;desc="2", conflicts;desc="1"`
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestOutcomeLabels(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, outcomeReserved},
		{&ReserveError{Err: fmt.Errorf("%w: x", ErrFenced)}, outcomeFenced},
		{&ReserveError{Err: fmt.Errorf("%w: x", ErrConflict)}, outcomeVersionConflict},
		{&ReserveError{Err: fmt.Errorf("%w: x", ErrRequestIDReused)}, outcomeRequestIDReused},
		{&ReserveError{Err: &fieldError{field: "sku", msg: "bad"}}, outcomeInvalid},
		{&ReserveError{Err: context.Canceled}, outcomeCanceled},
		{&ReserveError{Err: errors.New("disk on fire")}, outcomeError},
	}
	for _, tt := range tests {
		if got := outcome(Reservation{}, tt.err); got != tt.want {
			t.Errorf("outcome(%v): got %q, want %q", tt.err, got, tt.want)
		}
	}
	if got := errorFor(errors.New("disk on fire")); got.Status != 500 || strings.Contains(got.Message, "disk") {
		t.Errorf("errorFor(internal): got %d %q, want 500 without the cause", got.Status, got.Message)
	}
}

package inventory

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serve runs h on a real listener with the package's server settings and
// returns its base URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := NewServer("", h)
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
	return "http://" + ln.Addr().String()
}

func newClient(t *testing.T, base string, timeout time.Duration) *Client {
	t.Helper()
	c, err := NewClient(base, &http.Client{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The client against the real server: every answer of the API comes back as
// the value or the package error the in-process Service gives.
func TestClientAgainstServer(t *testing.T) {
	h, _, _ := newAPI(t)
	c := newClient(t, serve(t, h)+"/", 30*time.Second)
	ctx := context.Background()

	if err := c.SetStock(ctx, "gadget", 4); err != nil {
		t.Fatalf("SetStock: %v", err)
	}
	if n, err := c.Stock(ctx, "gadget"); err != nil || n != 4 {
		t.Fatalf("Stock: got %d, %v; want 4", n, err)
	}
	r, err := c.Reserve(ctx, Request{SKU: "gadget", Quantity: 3, RequestID: "c-1"})
	if err != nil || r.Replayed || r.Quantity != 3 || r.Guard != GuardDBAtomic || r.Holder != "api" || r.ID == 0 {
		t.Fatalf("Reserve: got %+v, %v; want a new reservation of 3 by api", r, err)
	}
	again, err := c.Reserve(ctx, Request{SKU: "gadget", Quantity: 3, RequestID: "c-1"})
	if err != nil || !again.Replayed || again.ID != r.ID {
		t.Errorf("replay: got %+v, %v; want the original, replayed", again, err)
	}
	if st, err := c.Ready(ctx); err != nil || !st.Ready || st.Guard != GuardDBAtomic || st.Lock != "none" || st.Store != "ok" {
		t.Errorf("Ready: got %+v, %v; want ready, db-atomic, lock none", st, err)
	}

	tests := []struct {
		name string
		req  Request
		want error
		code string
	}{
		{"out of stock", Request{SKU: "gadget", Quantity: 2, RequestID: "c-2"}, ErrOutOfStock, "out_of_stock"},
		{"request id reused", Request{SKU: "gadget", Quantity: 1, RequestID: "c-1"}, ErrRequestIDReused, "request_id_reused"},
		{"unknown sku", Request{SKU: "nope", Quantity: 1, RequestID: "c-3"}, ErrNotFound, "sku_not_found"},
		{"invalid quantity", Request{SKU: "gadget", Quantity: 0, RequestID: "c-4"}, ErrInvalid, "invalid_quantity"},
		{"invalid request id", Request{SKU: "gadget", Quantity: 1, RequestID: "has space"}, ErrInvalid, "invalid_request_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Reserve(ctx, tt.req)
			var re *ReserveError
			var ae *APIError
			if !errors.Is(err, tt.want) || !errors.As(err, &re) || !errors.As(err, &ae) || ae.Code != tt.code {
				t.Errorf("got %v, want a *ReserveError wrapping an *APIError %s that is %v", err, tt.code, tt.want)
			}
		})
	}
	if _, err := c.Stock(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stock of an unknown SKU: got %v, want ErrNotFound", err)
	}
	if err := c.SetStock(ctx, "gadget", -1); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetStock(-1): got %v, want ErrInvalid", err)
	}
	if n, _ := c.Stock(ctx, "gadget"); n != 1 {
		t.Errorf("stock after the refusals: got %d, want 1", n)
	}
}

// The lock answers carry their Retry-After and the lock timing of the
// failed acquire, read back from Server-Timing.
func TestClientLockErrors(t *testing.T) {
	cluster := startRedis(t, 3)
	store := openStore(t, sqliteDSN(t))
	seed(t, store, "held", 5)
	ctx := context.Background()
	for _, n := range cluster.Nodes {
		if err := n.Client().Set(ctx, lockKey("held"), "someone-else", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	svc := replica(t, store, GuardRedlock, cluster, WithAcquireTimeout(150*time.Millisecond))
	c := newClient(t, serve(t, newTestHandler(t, svc, nil)), 30*time.Second)
	_, err := c.Reserve(ctx, Request{SKU: "held", Quantity: 1, RequestID: "h-1"})
	var re *ReserveError
	var ae *APIError
	if !errors.Is(err, ErrContended) || !errors.As(err, &re) || !errors.As(err, &ae) || ae.RetryAfter != 1 || re.Timing.Attempts < 1 {
		t.Errorf("got %v (timing %+v), want ErrContended with Retry-After 1 and the acquire's attempts", err, re)
	}
	if st, err := c.Ready(ctx); err != nil || !st.Ready || st.Quorum != 2 || st.NodesUp != 3 {
		t.Errorf("Ready: got %+v, %v; want ready with 3 nodes up, quorum 2", st, err)
	}
}

// Every row of the error table survives the trip: what the server writes
// for a code, the client reads back as the same code, status and error. This
// is what keeps the two sides from drifting.
func TestErrorTableRoundTrip(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/answer/{code}", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, answer(r.PathValue("code"), "because"))
	})
	mux.HandleFunc("/raw/{status}/{body}", func(w http.ResponseWriter, r *http.Request) {
		status := map[string]int{"502": 502, "429": 429, "500": 500, "404": 404, "302": 302}[r.PathValue("status")]
		w.WriteHeader(status)
		io.WriteString(w, map[string]string{
			"html":       "<html>bad gateway</html>",
			"contended":  `{"error":{"code":"contended","message":"wrong status for this code"}}`,
			"newcode":    `{"error":{"code":"teapot","message":"a code the table does not know"}}`,
			"empty":      "",
			"notanerror": `{"status":"ok"}`,
		}[r.PathValue("body")])
	})
	c := newClient(t, serve(t, mux), 30*time.Second)
	for _, row := range errorCodes {
		t.Run(row.code, func(t *testing.T) {
			resp, err := c.do(context.Background(), http.MethodGet, "/answer/"+row.code, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			ae := readAnswerError(resp)
			if ae.Status != row.status || ae.Code != row.code || ae.RetryAfter != row.retryAfter || ae.Message != "because" {
				t.Errorf("got %d %q retry %d %q, want %d %q retry %d", ae.Status, ae.Code, ae.RetryAfter, ae.Message, row.status, row.code, row.retryAfter)
			}
			if row.err != nil && !errors.Is(ae, row.err) {
				t.Errorf("got %v, want it to be %v", ae, row.err)
			}
			if row.err == nil && ae.Unwrap() != nil {
				t.Errorf("got %v wrapping %v, want no package error", ae, ae.Unwrap())
			}
		})
	}
	for _, tt := range []struct{ path string }{
		{"/raw/502/html"}, {"/raw/500/contended"}, {"/raw/404/newcode"}, {"/raw/429/empty"}, {"/raw/500/notanerror"}, {"/raw/302/empty"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			resp, err := c.do(context.Background(), http.MethodGet, tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			ae := readAnswerError(resp)
			if !errors.Is(ae, ErrUnexpectedResponse) || ae.Status != resp.StatusCode || ae.Message == "" {
				t.Errorf("got %v (status %d), want ErrUnexpectedResponse with status %d and a message", ae, ae.Status, resp.StatusCode)
			}
		})
	}
}

// A request that never left tells the caller so (nothing happened, retry
// freely); one that was sent and got no answer says its outcome is unknown.
func TestClientTransitErrors(t *testing.T) {
	ctx := context.Background()
	req := Request{SKU: "widget", Quantity: 1, RequestID: "t-1"}

	t.Run("refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens here now
		_, err = newClient(t, "http://"+addr, 30*time.Second).Reserve(ctx, req)
		if !errors.Is(err, ErrNotSent) || errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("got %v, want ErrNotSent", err)
		}
	})

	// A server that reads the whole request and then resets the connection
	// (a process killed mid-request): the request arrived, its fate is unknown.
	t.Run("reset after reading", func(t *testing.T) {
		addr := resetServer(t, func(conn net.Conn) {
			r, err := http.ReadRequest(bufio.NewReader(conn))
			if err == nil {
				_, _ = io.Copy(io.Discard, r.Body)
			}
		})
		_, err := newClient(t, "http://"+addr, 30*time.Second).Reserve(ctx, req)
		if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrNotSent) {
			t.Errorf("got %v, want ErrOutcomeUnknown", err)
		}
	})

	// A server that reads the request and never answers: the client's
	// timeout ends the wait, and the outcome is unknown.
	t.Run("no answer", func(t *testing.T) {
		release := make(chan struct{})
		addr := resetServer(t, func(conn net.Conn) {
			r, err := http.ReadRequest(bufio.NewReader(conn))
			if err == nil {
				_, _ = io.Copy(io.Discard, r.Body)
			}
			<-release
		})
		t.Cleanup(func() { close(release) }) // runs before resetServer's cleanup waits for the handler
		_, err := newClient(t, "http://"+addr, 200*time.Millisecond).Reserve(ctx, req)
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("got %v, want ErrOutcomeUnknown", err)
		}
	})
}

// resetServer accepts connections on a loopback port and, for each, runs
// handle and then resets the connection (SO_LINGER 0: an RST, as a killed
// process's kernel sends).
func resetServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			handle(conn)
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

func TestNewClientRejects(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://h:1", "http://", "http://h:1/?x=1", "::"} {
		if _, err := NewClient(u, nil); err == nil || !strings.HasPrefix(err.Error(), "inventory: ") {
			t.Errorf("NewClient(%q): got %v, want an inventory: error", u, err)
		}
	}
}

// The Server-Timing header is written by serverTiming and read by
// parseServerTiming; both live here so the format has one owner.
func TestServerTimingRoundTrip(t *testing.T) {
	in := Timing{Acquire: 1250 * time.Microsecond, Hold: 400 * time.Microsecond, Release: 2 * time.Millisecond, Attempts: 3, Conflicts: 2}
	if got := parseServerTiming(serverTiming(in)); got != in {
		t.Errorf("round trip: got %+v, want %+v", got, in)
	}
	got := parseServerTiming(`acquire;dur=1.250, other;dur=9, hold;dur=bad, attempts;desc="2"`)
	if want := (Timing{Acquire: 1250 * time.Microsecond, Attempts: 2}); got != want {
		t.Errorf("with unknown and malformed parts: got %+v, want %+v", got, want)
	}
	if got := parseServerTiming(""); got != (Timing{}) {
		t.Errorf("empty header: got %+v", got)
	}
}

package inventory

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A client that sends half a body and stalls is cut off by the server's
// read timeout and told so: 408 request_timeout, counted as a timeout, not
// as an invalid reservation (its JSON was never wrong, just late).
func TestSlowBodyIsRequestTimeout(t *testing.T) {
	h, svc, _ := newAPI(t)
	srv := NewServer("", h)
	srv.ReadTimeout = time.Second // short, so the test is quick; nothing is asserted about time
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

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"sku":"widget","quantity":1,"request_id":"slow-1"}`
	if _, err := fmt.Fprintf(conn, "POST /v1/reservations HTTP/1.1\r\nHost: inventory\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		len(body), body[:len(body)/2]); err != nil {
		t.Fatal(err)
	}
	// The rest of the body never comes. The deadline only keeps a broken
	// server from hanging the test.
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to a stalled body: %v", err)
	}
	defer resp.Body.Close()
	var e errorBody
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout || e.Error.Code != "request_timeout" {
		t.Errorf("got %d %q, want 408 request_timeout", resp.StatusCode, e.Error.Code)
	}
	m := h.(*handler).m
	if got := testutil.ToFloat64(m.reservations.WithLabelValues("db-atomic", outcomeRequestTimeout)); got != 1 {
		t.Errorf("reservations_total{outcome=request_timeout}: got %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.reservations.WithLabelValues("db-atomic", outcomeInvalid)); got != 0 {
		t.Errorf("reservations_total{outcome=invalid}: got %v, want 0", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("/v1/reservations", "408")); got != 1 {
		t.Errorf(`http_requests_total{route="/v1/reservations",code="408"}: got %v, want 1`, got)
	}
	if n, _ := svc.Store().Stock(t.Context(), "widget"); n != 5 {
		t.Errorf("stock after a cut-off request: got %d, want 5", n)
	}
}

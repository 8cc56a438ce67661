package inventory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redlocklab/redlocklab/inventory/internal/wire"
)

// maxAnswerBytes bounds how much of an answer the client reads.
const maxAnswerBytes = 1 << 16

// Client is a client of one instance of the HTTP API (`redlab serve`). Its
// errors are the package's: an error answer is an *APIError wrapping the
// error its code stands for, so errors.Is(err, ErrContended) holds for a 503
// "contended" exactly as for Service.Reserve; a request that failed in
// transit wraps ErrNotSent (it never arrived: nothing happened) or
// ErrOutcomeUnknown (it was sent and may have committed). It is safe for
// concurrent use.
type Client struct {
	base string
	hc   *http.Client
}

// NewClient returns a client of the instance at baseURL (http://host:port,
// optionally with a path prefix). hc carries the transport and the timeout
// (nil: http.DefaultTransport, 30s); the client never follows redirects, which
// the API does not send.
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("inventory: client: base URL %q: want http://host:port", baseURL)
	}
	c := http.Client{Timeout: 30 * time.Second}
	if hc != nil {
		c = *hc
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{base: strings.TrimRight(baseURL, "/"), hc: &c}, nil
}

// URL is the instance's base URL.
func (c *Client) URL() string { return c.base }

// Reserve is POST /v1/reservations: Service.Reserve over HTTP. Failures are
// *ReserveError, carrying the lock timing the server reported in its
// Server-Timing header.
func (c *Client) Reserve(ctx context.Context, req Request) (Reservation, error) {
	body, err := json.Marshal(wire.Reservation{SKU: req.SKU, Quantity: req.Quantity, RequestID: req.RequestID})
	if err != nil {
		return Reservation{}, &ReserveError{Err: fmt.Errorf("inventory: client: %w", err)}
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/reservations", body)
	if err != nil {
		return Reservation{}, &ReserveError{Err: err}
	}
	defer resp.Body.Close()
	t := parseServerTiming(resp.Header.Get("Server-Timing"))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return Reservation{}, &ReserveError{Timing: t, Err: readAnswerError(resp)}
	}
	var rj reservationJSON
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(&rj); err != nil {
		// The status says it committed; the details are lost.
		return Reservation{}, &ReserveError{Timing: t, Err: fmt.Errorf("inventory: reserve %q: committed (HTTP %d), but the answer could not be read: %w",
			req.RequestID, resp.StatusCode, err)}
	}
	return Reservation{
		ID: rj.ID, RequestID: rj.RequestID, SKU: rj.SKU, Quantity: rj.Quantity, Guard: rj.Guard,
		Holder: rj.Holder, Fence: rj.Fence, CreatedAt: rj.CreatedAt, Replayed: rj.Replayed, Timing: t,
	}, nil
}

// Stock is GET /v1/stock/{sku}.
func (c *Client) Stock(ctx context.Context, sku string) (int64, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/stock/"+url.PathEscape(sku), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, readAnswerError(resp)
	}
	var sj stockJSON
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(&sj); err != nil {
		return 0, fmt.Errorf("inventory: stock of %s: %w", sku, err)
	}
	return sj.Stock, nil
}

// SetStock is PUT /v1/stock/{sku}: see Store.Seed.
func (c *Client) SetStock(ctx context.Context, sku string, stock int64) error {
	body, err := json.Marshal(wire.Stock{Stock: stock})
	if err != nil {
		return fmt.Errorf("inventory: client: %w", err)
	}
	resp, err := c.do(ctx, http.MethodPut, "/v1/stock/"+url.PathEscape(sku), body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readAnswerError(resp)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
	return nil
}

// PauseNext is POST /v1/faults/pause with a count (an instance started with
// `redlab serve --fault-hooks`): the next count reservations pause for d
// with scope (see Faults.PauseNext).
func (c *Client) PauseNext(ctx context.Context, d time.Duration, count int, scope PauseScope) error {
	body, err := json.Marshal(struct {
		Duration string     `json:"duration"`
		Count    int        `json:"count"`
		Scope    PauseScope `json:"scope,omitempty"`
	}{d.String(), count, scope})
	if err != nil {
		return fmt.Errorf("inventory: client: %w", err)
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/faults/pause", body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readAnswerError(resp)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
	return nil
}

// ReadyStatus is an instance's answer to GET /readyz.
type ReadyStatus struct {
	Ready bool
	Guard Guard
	// Store and Lock are "ok", the dependency's error, or for Lock "none"
	// (a guard without a lock).
	Store, Lock string
	// NodesUp and Quorum describe the lock nodes (0 without a lock).
	NodesUp, Quorum int
}

// Ready is GET /readyz. An instance that answers "not ready" is a
// ReadyStatus with Ready false, not an error.
func (c *Client) Ready(ctx context.Context) (ReadyStatus, error) {
	resp, err := c.do(ctx, http.MethodGet, "/readyz", nil)
	if err != nil {
		return ReadyStatus{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		return ReadyStatus{}, readAnswerError(resp)
	}
	var rj readyJSON
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(&rj); err != nil || rj.Status == "" {
		return ReadyStatus{}, &APIError{Status: resp.StatusCode, Message: "not a readiness answer", err: ErrUnexpectedResponse}
	}
	st := ReadyStatus{Ready: resp.StatusCode == http.StatusOK && rj.Status == "ready", Guard: rj.Guard, Store: rj.Store, Lock: rj.Lock}
	if rj.Nodes != nil {
		st.NodesUp, st.Quorum = rj.Nodes.Up, rj.Nodes.Quorum
	}
	return st, nil
}

// do sends one request. A failure in transit is classified: ErrNotSent when
// the request cannot have reached the server whole, else ErrOutcomeUnknown.
func (c *Client) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	// wrote is whether the request of the current attempt went out whole.
	// The transport may retry a request nothing of which was written, on a
	// new connection: each attempt starts with GetConn.
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{
		GetConn:      func(string) { wrote.Store(false) },
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote.Store(i.Err == nil) },
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("inventory: client: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %w", transitError(err, wrote.Load()), method, path, err)
	}
	return resp, nil
}

// transitError says what a round trip that got no answer means. The trace's
// WroteRequest reports the request written into the connection's buffer;
// the flush that follows can still fail, and then the error is a write
// error: the request did not go out whole. A dial error means no
// connection. Everything else (a reset, an EOF, a timeout while waiting for
// the answer) came after the request was sent.
func transitError(err error, wrote bool) error {
	var op *net.OpError
	if !wrote || (errors.As(err, &op) && (op.Op == "dial" || op.Op == "write")) {
		return ErrNotSent
	}
	return ErrOutcomeUnknown
}

// readAnswerError reads an error answer: the API's JSON error, matched
// against the error table, or ErrUnexpectedResponse for anything else.
func readAnswerError(resp *http.Response) *APIError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	retryAfter, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	var eb errorBody
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error.Code == "" {
		msg := strings.TrimSpace(string(b))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return &APIError{Status: resp.StatusCode, Message: msg, RetryAfter: retryAfter, err: ErrUnexpectedResponse}
	}
	return answerError(resp.StatusCode, eb.Error.Code, eb.Error.Message, retryAfter)
}

// parseServerTiming reads the header serverTiming writes: `acquire;dur=1.2,
// hold;dur=0.4, release;dur=0.3, attempts;desc="2", conflicts;desc="0"`
// (durations in ms).
// Unknown metrics and malformed values are skipped.
func parseServerTiming(h string) Timing {
	var t Timing
	for _, metric := range strings.Split(h, ",") {
		parts := strings.Split(strings.TrimSpace(metric), ";")
		name := strings.TrimSpace(parts[0])
		for _, p := range parts[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			v = strings.Trim(v, `"`)
			switch {
			case k == "dur":
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || f < 0 {
					continue
				}
				d := time.Duration(f * float64(time.Millisecond))
				switch name {
				case "acquire":
					t.Acquire = d
				case "hold":
					t.Hold = d
				case "release":
					t.Release = d
				}
			case k == "desc" && name == "attempts":
				if n, err := strconv.Atoi(v); err == nil {
					t.Attempts = n
				}
			case k == "desc" && name == "conflicts":
				if n, err := strconv.Atoi(v); err == nil {
					t.Conflicts = n
				}
			}
		}
	}
	return t
}

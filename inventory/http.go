package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redlocklab/redlocklab/inventory/internal/wire"
)

// MaxBodyBytes caps every request body; a larger one gets 413.
const MaxBodyBytes = wire.MaxBodyBytes

// Timeouts of the server NewServer returns. WriteTimeout leaves room for an
// acquire timeout plus an injected pause of up to MaxPause.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 15 * time.Second
	WriteTimeout      = 90 * time.Second
	IdleTimeout       = 120 * time.Second
)

// NewServer returns an http.Server for h with the package's timeouts.
// Shutdown lets in-flight reservations finish, and with them their locks'
// deferred releases.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
}

// HandlerOption configures NewHandler.
type HandlerOption func(*handlerConfig)

type handlerConfig struct {
	gatherer prometheus.Gatherer
	faults   *Faults
	log      *slog.Logger
}

// WithGatherer serves /metrics from g. Without it, /metrics serves the
// registerer given to NewHandler when that is also a Gatherer (a
// *prometheus.Registry is), and is absent otherwise.
func WithGatherer(g prometheus.Gatherer) HandlerOption {
	return func(c *handlerConfig) { c.gatherer = g }
}

// WithFaults registers the fault-injection endpoints (/v1/faults/pause)
// backed by f. Only `redlab serve --fault-hooks` does this; the Service must
// have f.Hook() as its pause hook for the pauses to happen.
func WithFaults(f *Faults) HandlerOption {
	return func(c *handlerConfig) { c.faults = f }
}

// WithLogger sets where unexpected errors are logged (default slog.Default).
func WithLogger(l *slog.Logger) HandlerOption {
	return func(c *handlerConfig) { c.log = l }
}

// handler is the HTTP API, a thin layer over a Service. See openapi.yaml.
type handler struct {
	svc     *Service
	cfg     handlerConfig
	m       *metrics
	metrics http.Handler // nil: no /metrics
	// fixed holds the routes of exact paths, built once: read-only, shared
	// by every request.
	fixed map[string]route
}

// NewHandler returns the HTTP API of s, registering its metrics on reg
// (which may be nil: no metrics). Handlers sharing a registry share the
// collectors; a registry already holding different metrics of the same names
// makes it panic, as prometheus.MustRegister would.
func NewHandler(s *Service, reg prometheus.Registerer, opts ...HandlerOption) http.Handler {
	cfg := handlerConfig{log: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	h := &handler{svc: s, cfg: cfg, m: newMetrics(reg)}
	g := cfg.gatherer
	if g == nil {
		g, _ = reg.(prometheus.Gatherer)
	}
	if g != nil {
		h.metrics = promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	}
	h.fixed = h.fixedRoutes()
	return h
}

// route is one path's handlers by method.
type route struct {
	name    string // the metrics label: a pattern, never a raw path
	methods map[string]http.HandlerFunc
}

// fixedRoutes are the routes of exact paths; /metrics and the fault
// endpoints only when configured.
func (h *handler) fixedRoutes() map[string]route {
	rs := []route{
		{"/v1/reservations", map[string]http.HandlerFunc{http.MethodPost: h.reserve}},
		{"/healthz", map[string]http.HandlerFunc{http.MethodGet: h.healthz}},
		{"/readyz", map[string]http.HandlerFunc{http.MethodGet: h.readyz}},
	}
	if h.metrics != nil {
		rs = append(rs, route{"/metrics", map[string]http.HandlerFunc{http.MethodGet: h.metrics.ServeHTTP}})
	}
	if h.cfg.faults != nil {
		rs = append(rs, route{"/v1/faults/pause", map[string]http.HandlerFunc{
			http.MethodGet:    h.getFaults,
			http.MethodPost:   h.postFaults,
			http.MethodDelete: h.deleteFaults,
		}})
	}
	fixed := make(map[string]route, len(rs))
	for _, rt := range rs {
		fixed[rt.name] = rt
	}
	return fixed
}

func (h *handler) route(r *http.Request) route {
	p := r.URL.Path
	if rt, ok := h.fixed[p]; ok {
		return rt
	}
	if sku, ok := strings.CutPrefix(p, "/v1/stock/"); ok && !strings.Contains(sku, "/") {
		return route{"/v1/stock/{sku}", map[string]http.HandlerFunc{
			http.MethodGet: func(w http.ResponseWriter, r *http.Request) { h.getStock(w, r, sku) },
			http.MethodPut: func(w http.ResponseWriter, r *http.Request) { h.putStock(w, r, sku) },
		}}
	}
	return route{name: "unknown"}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := h.route(r)
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.cfg.log.Error("inventory: handler panic", "route", rt.name, "panic", v)
			if sw.status == 0 {
				writeError(sw, apiErr(http.StatusInternalServerError, "internal", "internal error"))
			}
		}
		h.m.requests.WithLabelValues(rt.name, strconv.Itoa(sw.code())).Inc()
	}()
	if rt.methods == nil {
		writeError(sw, apiErr(http.StatusNotFound, "not_found", "no such route: "+r.Method+" "+r.URL.Path))
		return
	}
	method := r.Method
	if method == http.MethodHead && rt.methods[http.MethodGet] != nil {
		method = http.MethodGet
	}
	fn := rt.methods[method]
	if fn == nil {
		allowed := make([]string, 0, len(rt.methods)+1)
		for m := range rt.methods {
			allowed = append(allowed, m)
			if m == http.MethodGet {
				allowed = append(allowed, http.MethodHead)
			}
		}
		sort.Strings(allowed)
		sw.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(sw, apiErr(http.StatusMethodNotAllowed, "method_not_allowed",
			fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, rt.name, strings.Join(allowed, ", "))))
		return
	}
	// The cap goes on the real writer, so the server closes the connection
	// of a client that sent too much.
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	fn(sw, r)
}

// statusWriter remembers the status code for the requests metric.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// apiError is an error response: status, a stable code, a message for
// humans and, for 503s, when to retry.
type apiError struct {
	status     int
	code       string
	message    string
	retryAfter int // seconds; 0 = no header
}

func apiErr(status int, code, msg string) *apiError {
	return &apiError{status: status, code: code, message: msg}
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.status, errorBody{Error: errorDetail{Code: e.code, Message: e.message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"code":"internal","message":"encoding the response failed"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func fromWire(e *wire.Error) *apiError { return apiErr(e.Status, e.Code, e.Message) }

type reservationJSON struct {
	ID        int64      `json:"id"`
	RequestID string     `json:"request_id"`
	SKU       string     `json:"sku"`
	Quantity  int64      `json:"quantity"`
	Guard     Guard      `json:"guard"`
	Holder    string     `json:"holder"`
	Fence     int64      `json:"fence"`
	CreatedAt time.Time  `json:"created_at"`
	Replayed  bool       `json:"replayed"`
	Timing    timingJSON `json:"timing"`
}

type timingJSON struct {
	AcquireMS float64 `json:"acquire_ms"`
	HoldMS    float64 `json:"hold_ms"`
	ReleaseMS float64 `json:"release_ms"`
	Attempts  int     `json:"attempts"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// serverTiming renders t as a Server-Timing header value (durations in ms).
func serverTiming(t Timing) string {
	f := func(d time.Duration) string { return strconv.FormatFloat(ms(d), 'f', 3, 64) }
	return fmt.Sprintf(`acquire;dur=%s, hold;dur=%s, release;dur=%s, attempts;desc="%d"`,
		f(t.Acquire), f(t.Hold), f(t.Release), t.Attempts)
}

func (h *handler) reserve(w http.ResponseWriter, r *http.Request) {
	guard := string(h.svc.Guard())
	in, werr := wire.DecodeReservation(r.Header, r.Body)
	if werr != nil {
		h.m.reservations.WithLabelValues(guard, outcomeInvalid).Inc()
		writeError(w, fromWire(werr))
		return
	}
	req := Request{SKU: in.SKU, Quantity: in.Quantity, RequestID: in.RequestID}
	start := time.Now()
	res, err := h.svc.Reserve(r.Context(), req)
	t := res.Timing
	var re *ReserveError
	if errors.As(err, &re) {
		t = re.Timing
	}
	h.m.observe(h.svc.Guard(), res, err, t, time.Since(start).Seconds())
	w.Header().Set("Server-Timing", serverTiming(t))
	if err != nil {
		aerr := errorFor(err)
		if aerr.status == http.StatusInternalServerError {
			h.cfg.log.Error("inventory: reserve failed", "sku", req.SKU, "request_id", req.RequestID, "err", err)
		}
		writeError(w, aerr)
		return
	}
	status := http.StatusCreated
	if res.Replayed {
		status = http.StatusOK
	}
	writeJSON(w, status, reservationJSON{
		ID: res.ID, RequestID: res.RequestID, SKU: res.SKU, Quantity: res.Quantity, Guard: res.Guard,
		Holder: res.Holder, Fence: res.Fence, CreatedAt: res.CreatedAt, Replayed: res.Replayed,
		Timing: timingJSON{AcquireMS: ms(t.Acquire), HoldMS: ms(t.Hold), ReleaseMS: ms(t.Release), Attempts: t.Attempts},
	})
}

// errorFor maps a package error to its response.
func errorFor(err error) *apiError {
	var fe *fieldError
	switch {
	case errors.As(err, &fe):
		return apiErr(http.StatusBadRequest, "invalid_"+fe.field, err.Error())
	case errors.Is(err, ErrInvalid):
		return apiErr(http.StatusBadRequest, "invalid_request", err.Error())
	case errors.Is(err, ErrNotFound):
		return apiErr(http.StatusNotFound, "sku_not_found", err.Error())
	case errors.Is(err, ErrOutOfStock):
		return apiErr(http.StatusConflict, "out_of_stock", err.Error())
	case errors.Is(err, ErrRequestIDReused):
		return apiErr(http.StatusUnprocessableEntity, "request_id_reused", err.Error())
	case errors.Is(err, ErrContended):
		return &apiError{http.StatusServiceUnavailable, "contended", err.Error(), 1}
	case errors.Is(err, ErrUnavailable):
		return &apiError{http.StatusServiceUnavailable, "unavailable", err.Error(), 2}
	case errors.Is(err, ErrFenced):
		return &apiError{http.StatusServiceUnavailable, "fenced", err.Error(), 1}
	case isContextErr(err):
		return &apiError{http.StatusServiceUnavailable, "canceled", "the request was canceled before it completed", 1}
	default:
		return apiErr(http.StatusInternalServerError, "internal", "internal error")
	}
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

type stockJSON struct {
	SKU   string `json:"sku"`
	Stock int64  `json:"stock"`
}

func (h *handler) getStock(w http.ResponseWriter, r *http.Request, sku string) {
	if err := validSKU(sku); err != nil {
		writeError(w, errorFor(err))
		return
	}
	n, err := h.svc.Store().Stock(r.Context(), sku)
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, stockJSON{SKU: sku, Stock: n})
}

func (h *handler) putStock(w http.ResponseWriter, r *http.Request, sku string) {
	if err := validSKU(sku); err != nil {
		writeError(w, errorFor(err))
		return
	}
	n, werr := wire.DecodeStock(r.Header, r.Body)
	if werr != nil {
		writeError(w, fromWire(werr))
		return
	}
	if err := h.svc.Store().Seed(r.Context(), sku, n); err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, stockJSON{SKU: sku, Stock: n})
}

// fail answers with err's response, logging what the client cannot fix.
func (h *handler) fail(w http.ResponseWriter, err error) {
	aerr := errorFor(err)
	if aerr.status == http.StatusInternalServerError {
		h.cfg.log.Error("inventory: request failed", "err", err)
	}
	writeError(w, aerr)
}

func (h *handler) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

type readyJSON struct {
	Status string       `json:"status"`
	Guard  Guard        `json:"guard"`
	Store  string       `json:"store"`
	Lock   string       `json:"lock"`
	Nodes  *nodesJSON   `json:"nodes,omitempty"`
	Error  *errorDetail `json:"error,omitempty"`
}

type nodesJSON struct {
	Up     int `json:"up"`
	Quorum int `json:"quorum"`
}

func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	rd := h.svc.Readiness(ctx)
	body := readyJSON{Status: "ready", Guard: h.svc.Guard(), Store: "ok", Lock: "ok"}
	if !h.svc.Guard().NeedsNodes() {
		body.Lock = "none"
	} else {
		body.Nodes = &nodesJSON{Up: rd.NodesUp, Quorum: rd.Quorum}
	}
	if rd.Store != nil {
		body.Store = rd.Store.Error()
	}
	if rd.Lock != nil {
		body.Lock = rd.Lock.Error()
	}
	if !rd.Ready() {
		body.Status = "not_ready"
		body.Error = &errorDetail{Code: "not_ready", Message: "a dependency did not answer; see store and lock"}
		w.Header().Set("Retry-After", "2")
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

type faultsJSON struct {
	Random struct {
		Duration string  `json:"duration"`
		Fraction float64 `json:"fraction"`
	} `json:"random"`
	Next struct {
		Duration string `json:"duration"`
		Count    int    `json:"count"`
	} `json:"next"`
}

func (h *handler) writeFaults(w http.ResponseWriter) {
	s := h.cfg.faults.State()
	var body faultsJSON
	body.Random.Duration, body.Random.Fraction = s.Random.Duration.String(), s.Random.Fraction
	body.Next.Duration, body.Next.Count = s.Next.Duration.String(), s.Next.Count
	writeJSON(w, http.StatusOK, body)
}

func (h *handler) getFaults(w http.ResponseWriter, _ *http.Request) { h.writeFaults(w) }

func (h *handler) deleteFaults(w http.ResponseWriter, _ *http.Request) {
	h.cfg.faults.Clear()
	h.writeFaults(w)
}

// postFaults: {"duration":"2s","count":1} pauses the next count requests;
// {"duration":"2s","fraction":0.1} pauses a random tenth of all requests.
func (h *handler) postFaults(w http.ResponseWriter, r *http.Request) {
	fields, werr := wire.DecodeObject(r.Header, r.Body, "duration", "count", "fraction")
	if werr != nil {
		writeError(w, fromWire(werr))
		return
	}
	bad := func(msg string) { writeError(w, apiErr(http.StatusBadRequest, "invalid_fault", msg)) }
	var ds string
	if werr := wire.Field(fields, "duration", &ds, `a duration string like "2s"`); werr != nil {
		bad(werr.Message)
		return
	}
	d, err := time.ParseDuration(ds)
	if err != nil {
		bad(fmt.Sprintf("duration %q: want a Go duration like 500ms or 2s", ds))
		return
	}
	_, hasCount := fields["count"]
	_, hasFraction := fields["fraction"]
	switch {
	case hasCount && hasFraction:
		bad("give count (pause the next N requests) or fraction (pause a random share), not both")
		return
	case hasFraction:
		var fr float64
		if werr := wire.Field(fields, "fraction", &fr, "a number 0..1"); werr != nil {
			bad(werr.Message)
			return
		}
		err = h.cfg.faults.SetRandom(d, fr)
	default:
		count := 1
		if hasCount {
			if werr := wire.Field(fields, "count", &count, "an integer"); werr != nil {
				bad(werr.Message)
				return
			}
		}
		err = h.cfg.faults.PauseNext(d, count)
	}
	if err != nil {
		bad(err.Error())
		return
	}
	h.writeFaults(w)
}

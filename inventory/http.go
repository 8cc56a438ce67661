package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
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
	// mux holds the routes, built once: read-only, shared by every request.
	mux *http.ServeMux
}

// NewHandler returns the HTTP API of s, registering its metrics on reg
// (which may be nil: no metrics). Handlers sharing a registry share the
// collectors; a registry already holding different metrics of the same names
// is an error.
func NewHandler(s *Service, reg prometheus.Registerer, opts ...HandlerOption) (http.Handler, error) {
	cfg := handlerConfig{log: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	h := &handler{svc: s, cfg: cfg, m: m, mux: http.NewServeMux()}
	g := cfg.gatherer
	if g == nil {
		g, _ = reg.(prometheus.Gatherer)
	}
	if g != nil {
		h.metrics = promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	}
	h.mux.HandleFunc("POST /v1/reservations", h.reserve)
	h.mux.HandleFunc("GET /v1/stock/{sku}", h.getStock)
	h.mux.HandleFunc("PUT /v1/stock/{sku}", h.putStock)
	h.mux.HandleFunc("GET /healthz", h.healthz)
	h.mux.HandleFunc("GET /readyz", h.readyz)
	if h.metrics != nil {
		h.mux.Handle("GET /metrics", h.metrics)
	}
	if h.cfg.faults != nil {
		h.mux.HandleFunc("GET /v1/faults/pause", h.getFaults)
		h.mux.HandleFunc("POST /v1/faults/pause", h.postFaults)
		h.mux.HandleFunc("DELETE /v1/faults/pause", h.deleteFaults)
	}
	return h, nil
}

// ServeHTTP routes through the mux, except that a request no route takes
// gets the API's JSON error instead of the mux's plain text: 404, or 405
// with the mux's Allow header. The requests metric is labelled by the
// route's path pattern ("unknown" when none matched), never the raw path.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	route := "unknown"
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.cfg.log.Error("inventory: handler panic", "route", route, "panic", v)
			if sw.status == 0 {
				writeError(sw, answer(wire.CodeInternal, "internal error"))
			}
		}
		h.m.requests.WithLabelValues(route, strconv.Itoa(sw.code())).Inc()
	}()
	matched, pattern := h.mux.Handler(r)
	if pattern == "" || !cleanPath(r.URL.Path) {
		noRoute(sw, r, matched)
		return
	}
	_, route, _ = strings.Cut(pattern, " ")
	// The cap goes on the real writer, so the server closes the connection
	// of a client that sent too much.
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	h.mux.ServeHTTP(sw, r)
}

// cleanPath reports whether p is in the form the mux routes without a
// redirect (no "//", "/./" or "/../"). A client of a JSON API gets 404 for
// any other form: a redirect would turn its POST into a GET.
func cleanPath(p string) bool {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// noRoute answers a request no route takes. The mux's own answer, the
// handler it returned for r (run against a writer that keeps only the
// status and headers), says which: 405
// with an Allow header when another method would have matched, else 404.
func noRoute(w http.ResponseWriter, r *http.Request, muxAnswer http.Handler) {
	probe := &headerProbe{header: http.Header{}}
	muxAnswer.ServeHTTP(probe, r)
	if allow := probe.header.Get("Allow"); probe.status == http.StatusMethodNotAllowed && allow != "" {
		w.Header().Set("Allow", allow)
		writeError(w, answer(wire.CodeMethodNotAllowed,
			fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow)))
		return
	}
	writeError(w, answer(wire.CodeNotFound, "no such route: "+r.Method+" "+r.URL.Path))
}

// headerProbe is a ResponseWriter that keeps the status and headers and
// drops the body.
type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header { return p.header }

func (p *headerProbe) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}

func (p *headerProbe) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
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

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, e *APIError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, e.Status, errorBody{Error: errorDetail{Code: e.Code, Message: e.Message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"code":"` + wire.CodeInternal + `","message":"encoding the response failed"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func fromWire(e *wire.Error) *APIError { return answer(e.Code, e.Message) }

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
	Conflicts int     `json:"conflicts"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// serverTiming renders t as a Server-Timing header value (durations in ms).
func serverTiming(t Timing) string {
	f := func(d time.Duration) string { return strconv.FormatFloat(ms(d), 'f', 3, 64) }
	return fmt.Sprintf(`acquire;dur=%s, hold;dur=%s, release;dur=%s, attempts;desc="%d", conflicts;desc="%d"`,
		f(t.Acquire), f(t.Hold), f(t.Release), t.Attempts, t.Conflicts)
}

func (h *handler) reserve(w http.ResponseWriter, r *http.Request) {
	guard := string(h.svc.Guard())
	in, werr := wire.DecodeReservation(r.Header, r.Body)
	if werr != nil {
		outcome := outcomeInvalid
		if werr.Code == wire.CodeRequestTimeout {
			outcome = outcomeRequestTimeout
		}
		h.m.reservations.WithLabelValues(guard, outcome).Inc()
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
	if !h.svc.metered() {
		h.m.observe(h.svc.Guard(), res, err, t, time.Since(start).Seconds())
	}
	w.Header().Set("Server-Timing", serverTiming(t))
	if err != nil {
		aerr := errorFor(err)
		if aerr.Status == http.StatusInternalServerError {
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
		Timing: timingJSON{AcquireMS: ms(t.Acquire), HoldMS: ms(t.Hold), ReleaseMS: ms(t.Release), Attempts: t.Attempts, Conflicts: t.Conflicts},
	})
}

type stockJSON struct {
	SKU   string `json:"sku"`
	Stock int64  `json:"stock"`
}

func (h *handler) getStock(w http.ResponseWriter, r *http.Request) {
	sku := r.PathValue("sku")
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

func (h *handler) putStock(w http.ResponseWriter, r *http.Request) {
	sku := r.PathValue("sku")
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
	if aerr.Status == http.StatusInternalServerError {
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
	if !h.svc.Guard().Locks() {
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
		nr := answer(wire.CodeNotReady, "a dependency did not answer; see store and lock")
		body.Error = &errorDetail{Code: nr.Code, Message: nr.Message}
		w.Header().Set("Retry-After", strconv.Itoa(nr.RetryAfter))
		writeJSON(w, nr.Status, body)
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
		Scope    string `json:"scope,omitempty"`
	} `json:"next"`
}

func (h *handler) writeFaults(w http.ResponseWriter) {
	s := h.cfg.faults.State()
	var body faultsJSON
	body.Random.Duration, body.Random.Fraction = s.Random.Duration.String(), s.Random.Fraction
	body.Next.Duration, body.Next.Count, body.Next.Scope = s.Next.Duration.String(), s.Next.Count, string(s.Next.Scope)
	writeJSON(w, http.StatusOK, body)
}

func (h *handler) getFaults(w http.ResponseWriter, _ *http.Request) { h.writeFaults(w) }

func (h *handler) deleteFaults(w http.ResponseWriter, _ *http.Request) {
	h.cfg.faults.Clear()
	h.writeFaults(w)
}

// postFaults: {"duration":"2s","count":1} pauses the next count requests
// ("scope":"process" stops their whole process instead, see ScopeProcess);
// {"duration":"2s","fraction":0.1} pauses a random tenth of all requests.
func (h *handler) postFaults(w http.ResponseWriter, r *http.Request) {
	fields, werr := wire.DecodeObject(r.Header, r.Body, "duration", "count", "fraction", "scope")
	if werr != nil {
		writeError(w, fromWire(werr))
		return
	}
	bad := func(msg string) { writeError(w, answer(wire.CodeInvalidFault, msg)) }
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
	_, hasScope := fields["scope"]
	var scope PauseScope
	if hasScope {
		var ss string
		if werr := wire.Field(fields, "scope", &ss, "one of "+PauseScopes()); werr != nil {
			bad(werr.Message)
			return
		}
		if scope, err = ParsePauseScope(ss); err != nil {
			bad(strings.TrimPrefix(err.Error(), "inventory: "))
			return
		}
	}
	switch {
	case hasCount && hasFraction:
		bad("give count (pause the next N requests) or fraction (pause a random share), not both")
		return
	case hasFraction && hasScope:
		bad("scope goes with count: a random share of requests always pauses with request scope")
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
		err = h.cfg.faults.PauseNext(d, count, scope)
	}
	if err != nil {
		bad(err.Error())
		return
	}
	h.writeFaults(w)
}

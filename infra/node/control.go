package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/fault"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// ErrInvalid is returned for a fault request with bad parameters.
var ErrInvalid = errors.New("node: invalid fault parameters")

// The control endpoint: HTTP on 127.0.0.1, one per node, served by the
// supervisor. Anyone on the machine can reach a loopback port and inject
// faults: the lab is a test bench. The endpoint never hands out the ACL
// passwords (those stay in the 0600 credentials file), so reaching it does
// not give access to the nodes' data.
//
//	GET  /v1/status                       -> Status
//	GET  /metrics                         -> the node's state and faults for Prometheus (metrics.go)
//	POST /v1/faults/{kind}[?target=NOTE]  fault.Params -> FaultResult
//
// kind is a kind of the catalogue (start ends a stop, heal the partitions
// and latency); the body is the fault's parameters as fault.Params writes
// them (package fault owns that JSON), none for a fault without. target,
// when given, is recorded with the fault: "leader" when the lab chose the
// etcd member because it led.

// CheckFault judges a fault by the catalogue (package fault) for target,
// before anything changes: ErrInvalid, or ErrUnsupported for what a
// machine node cannot apply. The lab's client calls it too, so that a bad
// request is refused before it is sent.
func CheckFault(kind fault.Kind, params fault.Params, target fault.Target, replicas bool) error {
	err := fault.Validate(kind, params, target, replicas)
	switch {
	case err == nil:
		return nil
	case target == fault.MachineNode && errors.Is(err, fault.ErrUnsupported):
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return fmt.Errorf("%w: %w", ErrInvalid, err)
}

// FaultResult is a node's answer to a fault request: what the fault did
// (Target and State are the node's), and its status after it.
type FaultResult struct {
	fault.Result
	Status Status `json:"status"`
}

// stamp is r as the daemon with status st reports it: its number and
// state.
func (st DaemonStatus) stamp(r fault.Result) fault.Result {
	r.Target, r.State = st.ID, string(st.State)
	return r
}

// errorBody is the answer to a request that failed; Code keeps the
// error's identity across the wire (Control.Fault restores it).
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// The codes of errorBody.
const (
	codeNotRunning  = "not_running" // ErrNotRunning
	codeInvalid     = "invalid"     // ErrInvalid
	codeUnsupported = "unsupported" // ErrUnsupported
	codeInternal    = "internal"    // anything else
)

func (s *supervisor) handler() http.Handler {
	mux := controlMux(func(context.Context) Status { return s.status() }, s,
		func(res fault.Result, st Status) any { return FaultResult{Result: st.stamp(res), Status: st} })
	mux.Handle("GET /metrics", s.metricsHandler())
	return mux
}

// controlMux is the part of the control endpoint every supervisor shares:
// GET /v1/status answers status; POST /v1/faults/{kind} reads the fault's
// fault.Params, applies it with inj and answers what answer makes of its
// result and the status after it, or the error (writeError).
func controlMux[S any](status func(context.Context) S, inj fault.Injector, answer func(fault.Result, S) any) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, status(r.Context()))
	})
	mux.HandleFunc("POST /v1/faults/{kind}", func(w http.ResponseWriter, r *http.Request) {
		var p fault.Params
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<16))
		// No body is a fault without parameters (kill, heal, …).
		if err == nil && len(bytes.TrimSpace(body)) > 0 {
			err = json.Unmarshal(body, &p)
		}
		if err != nil {
			writeError(w, fmt.Errorf("%w: %v", ErrInvalid, err))
			return
		}
		ctx := r.Context()
		if note := r.URL.Query().Get("target"); note != "" {
			ctx = withNote(ctx, "target", note)
		}
		res, err := inj.Apply(ctx, fault.Kind(r.PathValue("kind")), p)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, answer(res, status(r.Context())))
	})
	return mux
}

// serveControl serves h on 127.0.0.1:port until ctx ends, in goroutines
// counted in wg. Once ctx ends no new fault starts; requests in flight get
// a moment, then their connections (and contexts) are closed.
func serveControl(ctx context.Context, port int, h http.Handler, logger *log.Logger, wg *sync.WaitGroup) error {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("control endpoint: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
	}()
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	body := errorBody{Error: err.Error(), Code: codeInternal}
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrNotRunning):
		body.Code, code = codeNotRunning, http.StatusConflict
	case errors.Is(err, ErrInvalid):
		body.Code, code = codeInvalid, http.StatusBadRequest
	case errors.Is(err, ErrUnsupported):
		body.Code, code = codeUnsupported, http.StatusBadRequest
	}
	writeJSON(w, code, body)
}

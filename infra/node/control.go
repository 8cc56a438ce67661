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
//	GET  /v1/status          -> Status
//	GET  /metrics            -> the node's state and faults for Prometheus (metrics.go)
//	POST /v1/faults/{kind}   FaultRequest -> FaultResult
//
// kind is a FaultKind, or "start" (ends a stop) or "heal".

// FaultRequest is the body of POST /v1/faults/{kind}: the parameters of
// every fault; each uses its own.
type FaultRequest struct {
	Delay  *Duration `json:"delay,omitempty"`  // restart
	For    Duration  `json:"for,omitempty"`    // pause, clock-rate, partition, latency
	Add    Duration  `json:"add,omitempty"`    // latency
	Jitter Duration  `json:"jitter,omitempty"` // latency
	By     Duration  `json:"by,omitempty"`     // clock-jump
	Factor float64   `json:"factor,omitempty"` // clock-rate
	Lag    Duration  `json:"lag,omitempty"`    // failover
	// Target is recorded with the fault: "leader" when the lab chose the
	// etcd member because it led when the fault fired.
	Target string `json:"target,omitempty"`
	// params are the same parameters as the catalogue reads them, for
	// CheckFault (set by controlMux).
	params fault.Params
}

// CheckFault judges a fault request by the catalogue (package fault) for
// target, before anything changes: ErrInvalid, or ErrUnsupported for what a
// machine node cannot apply. The lab's client calls it too, so that a bad
// request is refused before it is sent.
func CheckFault(kind string, params fault.Params, target fault.Target, replicas bool) error {
	err := fault.Validate(fault.Kind(kind), params, target, replicas)
	switch {
	case err == nil:
		return nil
	case target == fault.MachineNode && errors.Is(err, fault.ErrUnsupported):
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return fmt.Errorf("%w: %w", ErrInvalid, err)
}

// FaultResult is what the node reports after a fault request.
type FaultResult struct {
	// Fault is the fault started, if the request started one.
	Fault *Fault `json:"fault,omitempty"`
	// ClockJump is set for clock-jump.
	ClockJump *ClockJumpResult `json:"clock_jump,omitempty"`
	// PowerLoss is set for power-loss.
	PowerLoss *PowerLossResult `json:"power_loss,omitempty"`
	// Failover is set for failover.
	Failover *FailoverResult `json:"failover,omitempty"`
	// Status is the node's status after the request.
	Status Status `json:"status"`
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
	mux := controlMux(func(context.Context) Status { return s.status() }, s.apply,
		func(res FaultResult, st Status) FaultResult { res.Status = st; return res })
	mux.Handle("GET /metrics", s.metricsHandler())
	return mux
}

// controlMux is the part of the control endpoint every supervisor shares:
// GET /v1/status answers status; POST /v1/faults/{kind} decodes a
// FaultRequest, runs apply and answers its result with the status after it
// (set by withStatus), or the error (writeError).
func controlMux[S, R any](status func(context.Context) S, apply func(context.Context, string, FaultRequest) (R, error), withStatus func(R, S) R) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, status(r.Context()))
	})
	mux.HandleFunc("POST /v1/faults/{kind}", func(w http.ResponseWriter, r *http.Request) {
		var req FaultRequest
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<16))
		// No body is a fault without parameters (kill, heal, …).
		if err == nil && len(bytes.TrimSpace(body)) > 0 {
			err = json.Unmarshal(body, &req)
			if err == nil {
				err = json.Unmarshal(body, &req.params)
			}
		}
		if err != nil {
			writeError(w, fmt.Errorf("%w: %v", ErrInvalid, err))
			return
		}
		res, err := apply(r.Context(), r.PathValue("kind"), req)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, withStatus(res, status(r.Context())))
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

// apply runs one fault request.
func (s *supervisor) apply(ctx context.Context, kind string, req FaultRequest) (FaultResult, error) {
	target := fault.ProcessNode
	if s.mach != nil {
		target = fault.MachineNode
	}
	if err := CheckFault(kind, req.params, target, s.rep != nil); err != nil {
		return FaultResult{}, err
	}
	if s.mach != nil {
		return s.applyMachine(ctx, kind, req)
	}
	return s.applyProcess(ctx, kind, req)
}

// applyProcess runs one fault request on a process node: the daemon's
// faults, and the clock models and the failover.
func (s *supervisor) applyProcess(ctx context.Context, kind string, req FaultRequest) (FaultResult, error) {
	if a, ok, err := s.applyShared(ctx, kind, req); ok {
		return FaultResult{Fault: a.fault, PowerLoss: a.powerLoss}, err
	}
	switch kind {
	case string(fault.ClockJump):
		return s.clockJump(ctx, time.Duration(req.By))
	case string(fault.ClockRate):
		return s.clockRate(req.Factor, time.Duration(req.For))
	case string(fault.Failover):
		return s.failover(ctx, time.Duration(req.Lag))
	}
	return FaultResult{}, fmt.Errorf("%w: unknown fault %q", ErrInvalid, kind)
}

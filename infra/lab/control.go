package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
)

// ErrInvalid is returned for a fault request with bad parameters.
var ErrInvalid = errors.New("lab: invalid fault parameters")

// The control endpoint: HTTP on 127.0.0.1, one per node, served by the
// supervisor. Anyone on the machine can reach a loopback port and inject
// faults: the lab is a test bench. The endpoint never hands out the ACL
// passwords (those stay in the 0600 credentials file), so reaching it does
// not give access to the nodes' data.
//
//	GET  /v1/status          -> NodeStatus
//	GET  /metrics            -> the node's state and faults for Prometheus (nodemetrics.go)
//	POST /v1/faults/{kind}   faultRequest -> FaultResult
//
// kind is a FaultKind, or "start" (ends a stop) or "heal".

// faultRequest carries the parameters of every fault; each uses its own.
type faultRequest struct {
	Delay  *Duration `json:"delay,omitempty"`  // restart
	For    Duration  `json:"for,omitempty"`    // pause, clock-rate
	Add    Duration  `json:"add,omitempty"`    // latency
	Jitter Duration  `json:"jitter,omitempty"` // latency
	By     Duration  `json:"by,omitempty"`     // clock-jump
	Factor float64   `json:"factor,omitempty"` // clock-rate
	Lag    Duration  `json:"lag,omitempty"`    // failover
	// Target is recorded with the fault: "leader" when the lab chose the
	// etcd member because it led when the fault fired.
	Target string `json:"target,omitempty"`
	// params are the same parameters as the catalogue reads them, for
	// checkFault (set by controlMux).
	params fault.Params
}

// checkFault judges a fault request by the catalogue (package fault) for
// target, before anything changes: ErrInvalid, or ErrUnsupported for what a
// machine node cannot apply.
func checkFault(kind string, params fault.Params, target fault.Target, replicas bool) error {
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
	Status NodeStatus `json:"status"`
}

type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"` // not_running | invalid | unsupported | internal
}

func (s *supervisor) handler() http.Handler {
	mux := controlMux(func(context.Context) NodeStatus { return s.status() }, s.apply,
		func(res FaultResult, st NodeStatus) FaultResult { res.Status = st; return res })
	mux.Handle("GET /metrics", s.metricsHandler())
	return mux
}

// controlMux is the part of the control endpoint every supervisor shares:
// GET /v1/status answers status; POST /v1/faults/{kind} decodes a
// faultRequest, runs apply and answers its result with the status after it
// (set by withStatus), or the error (writeError).
func controlMux[S, R any](status func(context.Context) S, apply func(context.Context, string, faultRequest) (R, error), withStatus func(R, S) R) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, status(r.Context()))
	})
	mux.HandleFunc("POST /v1/faults/{kind}", func(w http.ResponseWriter, r *http.Request) {
		var req faultRequest
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<16))
		if err == nil {
			err = json.Unmarshal(body, &req)
		}
		if err == nil {
			err = json.Unmarshal(body, &req.params)
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
	body := errorBody{Error: err.Error(), Code: "internal"}
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrNotRunning):
		body.Code, code = "not_running", http.StatusConflict
	case errors.Is(err, ErrInvalid):
		body.Code, code = "invalid", http.StatusBadRequest
	case errors.Is(err, ErrUnsupported):
		body.Code, code = "unsupported", http.StatusBadRequest
	}
	writeJSON(w, code, body)
}

// apply runs one fault request.
func (s *supervisor) apply(ctx context.Context, kind string, req faultRequest) (FaultResult, error) {
	target := fault.ProcessNode
	if s.mach != nil {
		target = fault.MachineNode
	}
	if err := checkFault(kind, req.params, target, s.rep != nil); err != nil {
		return FaultResult{}, err
	}
	if s.mach != nil {
		return s.applyMachine(ctx, kind, req)
	}
	return s.applyProcess(ctx, kind, req)
}

// applyProcess runs one fault request on a process node; a machine node
// shares the faults that act on the front or the process alone.
func (s *supervisor) applyProcess(ctx context.Context, kind string, req faultRequest) (FaultResult, error) {
	switch kind {
	case string(FaultKill):
		return s.kill(ctx, nil)
	case string(FaultPowerLoss):
		return s.powerLoss(ctx)
	case string(FaultRestart):
		d := time.Duration(*req.Delay) // checkFault: given
		return s.kill(ctx, &d)
	case string(FaultStop):
		return s.stop(ctx)
	case string(fault.Start):
		return s.startNode(ctx)
	case string(FaultPause):
		return s.pause(time.Duration(req.For))
	case string(FaultPartition):
		return s.partition()
	case string(fault.Heal):
		return s.heal(), nil
	case string(FaultLatency):
		return s.latency(time.Duration(req.Add), time.Duration(req.Jitter))
	case string(FaultClockJump):
		return s.clockJump(ctx, time.Duration(req.By))
	case string(FaultClockRate):
		return s.clockRate(req.Factor, time.Duration(req.For))
	case string(FaultFailover):
		return s.failover(ctx, time.Duration(req.Lag))
	}
	return FaultResult{}, fmt.Errorf("%w: unknown fault %q", ErrInvalid, kind)
}

func (s *supervisor) notRunningLocked() error {
	return fmt.Errorf("%w on node %d (%s)", ErrNotRunning, s.spec.ID, s.st.State)
}

// kill SIGKILLs redis-server (a crash: nothing is flushed). With delay set
// (the restart fault) the next pre-start uses it instead of the configured
// restart delay. It returns once the process is gone.
func (s *supervisor) kill(ctx context.Context, delay *time.Duration) (FaultResult, error) {
	s.mu.Lock()
	p, cancelGuard := s.proc, s.cancelGuard
	if delay == nil && p == nil {
		err := s.notRunningLocked()
		s.mu.Unlock()
		return FaultResult{}, err
	}
	var f Fault
	if delay == nil {
		f = s.faults.startLocked(FaultKill, nil)
	} else {
		f = s.faults.startLocked(FaultRestart, map[string]string{"delay": delay.String()})
		s.override = delay
		s.wantUp = true
	}
	s.mu.Unlock()
	switch {
	case p != nil:
		signalGroup(p.pid, syscall.SIGKILL)
		// Return once the supervisor has seen the crash.
		err := s.waitFor(ctx, func(st NodeStatus) bool { return st.RedisPID != p.pid })
		if err != nil {
			return FaultResult{}, err
		}
	case cancelGuard != nil:
		// Waiting out a delay: wait the new one instead.
		cancelGuard()
	default:
		s.poke()
	}
	return FaultResult{Fault: &f}, nil
}

// stop shuts redis-server down cleanly and keeps it down until start.
func (s *supervisor) stop(ctx context.Context) (FaultResult, error) {
	s.mu.Lock()
	if !s.wantUp && s.proc == nil {
		s.mu.Unlock()
		return FaultResult{}, nil
	}
	s.wantUp = false
	f := s.faults.startLocked(FaultStop, nil)
	p, cancelGuard := s.proc, s.cancelGuard
	s.mu.Unlock()
	if p != nil {
		s.stopProc(p)
	}
	if cancelGuard != nil {
		cancelGuard()
	}
	s.poke()
	err := s.waitFor(ctx, func(st NodeStatus) bool { return st.State == NodeStopped })
	return FaultResult{Fault: &f}, err
}

// startNode starts a stopped node and waits until it answers.
func (s *supervisor) startNode(ctx context.Context) (FaultResult, error) {
	s.mu.Lock()
	s.wantUp = true
	s.mu.Unlock()
	s.poke()
	err := s.waitFor(ctx, func(st NodeStatus) bool { return st.State == NodeUp || st.State == NodePaused })
	return FaultResult{}, err
}

// pause SIGSTOPs redis-server for d: connections stay open, nothing answers.
func (s *supervisor) pause(d time.Duration) (FaultResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || (s.st.State != NodeUp && s.st.State != NodePaused) {
		return FaultResult{}, s.notRunningLocked()
	}
	s.stopPauseLocked()
	f := s.faults.startLocked(FaultPause, map[string]string{"for": d.String()})
	s.paused.start(p, d, &s.wg, s.resume)
	s.setStateLocked(NodePaused)
	return FaultResult{Fault: &f}, nil
}

func (s *supervisor) resume(p *child) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused.proc != p {
		return
	}
	s.stopPauseLocked() // continues p
	if s.proc == p && s.st.State == NodePaused {
		s.setStateLocked(NodeUp)
	}
}

// stopPauseLocked forgets the pause (the caller continues or lost the
// process) and ends its fault.
func (s *supervisor) stopPauseLocked() {
	s.paused.stop()
	s.faults.endLocked(FaultPause, nil)
}

func (s *supervisor) partition() (FaultResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.Partitioned {
		return FaultResult{}, nil
	}
	if err := s.proxy.partition(); err != nil {
		return FaultResult{}, err
	}
	s.st.Partitioned = true
	f := s.faults.startLocked(FaultPartition, nil)
	return FaultResult{Fault: &f}, nil
}

// heal removes every network fault: partition and latency.
func (s *supervisor) heal() FaultResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proxy.heal()
	s.st.Partitioned, s.st.Latency, s.st.Jitter = false, 0, 0
	s.faults.endLocked(FaultPartition, nil)
	s.faults.endLocked(FaultLatency, nil)
	s.saveLocked()
	return FaultResult{}
}

func (s *supervisor) latency(add, jitter time.Duration) (FaultResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.proxy.latency(add, jitter); err != nil {
		return FaultResult{}, err
	}
	s.faults.endLocked(FaultLatency, nil)
	s.st.Latency, s.st.Jitter = Duration(add), Duration(jitter)
	if add <= 0 {
		s.st.Jitter = 0
		s.saveLocked()
		return FaultResult{}, nil
	}
	f := s.faults.startLocked(FaultLatency, map[string]string{"add": add.String(), "jitter": jitter.String()})
	return FaultResult{Fault: &f}, nil
}

// clockJump applies the clock-jump model (see clockjump.lua) through the
// node's private port, so it works on a partitioned node too.
func (s *supervisor) clockJump(ctx context.Context, by time.Duration) (FaultResult, error) {
	s.mu.Lock()
	if s.st.State != NodeUp {
		err := s.notRunningLocked()
		s.mu.Unlock()
		return FaultResult{}, err
	}
	s.mu.Unlock()
	f, err := s.faults.rec.start(FaultClockJump, map[string]string{"by": by.String()})
	if err != nil {
		s.log.Printf("record: %v", err)
	}
	res, err := clockJump(ctx, s.direct, by)
	endParams := map[string]string{
		"adjusted": strconv.FormatInt(res.Adjusted, 10), "deleted": strconv.FormatInt(res.Deleted, 10),
	}
	if err != nil {
		endParams = map[string]string{"error": err.Error()}
	}
	if rerr := s.faults.rec.end(f.ID, FaultClockJump, endParams); rerr != nil {
		s.log.Printf("record: %v", rerr)
	}
	if err != nil {
		return FaultResult{}, err
	}
	f.End = time.Now()
	for k, v := range endParams {
		f.Params[k] = v
	}
	return FaultResult{Fault: &f, ClockJump: &res}, nil
}

// clockRate models a clock running factor times as fast as real time for
// d: every tick the keys' TTLs move by (factor-1) times the real time
// elapsed. A factor below 1 (a slow clock) lengthens them.
func (s *supervisor) clockRate(factor float64, d time.Duration) (FaultResult, error) {
	const tick = 100 * time.Millisecond
	s.mu.Lock()
	if s.rateStop != nil {
		s.rateStop()
	}
	f := s.faults.startLocked(FaultClockRate, map[string]string{
		"factor": strconv.FormatFloat(factor, 'g', -1, 64), "for": d.String(),
	})
	ctx, cancel := context.WithTimeout(context.Background(), d)
	s.rateStop = cancel
	s.mu.Unlock()

	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		t := time.NewTicker(tick)
		defer t.Stop()
		last := time.Now()
		var carry time.Duration // sub-millisecond remainder
		var adjusted, deleted int64
		for {
			select {
			case <-ctx.Done():
				// What the clock gained since the last tick is owed too.
				end := time.Now()
				if dl, ok := ctx.Deadline(); ok && end.After(dl) {
					end = dl
				}
				carry += time.Duration(float64(end.Sub(last)) * (factor - 1))
				if step := carry.Truncate(time.Millisecond); step != 0 {
					jctx, jcancel := context.WithTimeout(context.Background(), time.Second)
					if res, err := clockJump(jctx, s.direct, step); err == nil {
						adjusted += res.Adjusted
						deleted += res.Deleted
					}
					jcancel()
				}
				s.mu.Lock()
				if s.st.Active[FaultClockRate] == f.ID {
					s.faults.endLocked(FaultClockRate, map[string]string{
						"adjusted": strconv.FormatInt(adjusted, 10), "deleted": strconv.FormatInt(deleted, 10),
					})
				}
				s.mu.Unlock()
				return
			case now := <-t.C:
				carry += time.Duration(float64(now.Sub(last)) * (factor - 1))
				last = now
				step := carry.Truncate(time.Millisecond)
				if step == 0 {
					continue
				}
				jctx, jcancel := context.WithTimeout(ctx, time.Second)
				res, err := clockJump(jctx, s.direct, step)
				jcancel()
				if err != nil {
					// Down or paused right now: the clock still ran, so the
					// jump is owed and applied once the node answers.
					continue
				}
				carry -= step
				adjusted += res.Adjusted
				deleted += res.Deleted
			}
		}
	}()
	return FaultResult{Fault: &f}, nil
}

// stopBackground ends the pause timer and the clock-rate goroutine.
func (s *supervisor) stopBackground() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopPauseLocked()
	if s.rateStop != nil {
		s.rateStop()
		s.rateStop = nil
	}
}

// endAllFaults closes every fault still open when the supervisor stops for
// good: the node, and its faults, are gone.
func (s *supervisor) endAllFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.endAllLocked("node stop")
	s.st.Partitioned, s.st.Latency, s.st.Jitter = false, 0, 0
	s.saveLocked()
}

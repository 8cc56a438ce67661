package node

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PowerLossResult says what a power loss took from a node.
type PowerLossResult struct {
	// Persistence is the node's profile, which decides what is lost:
	// always loses nothing acknowledged, everysec the last second of
	// writes, none everything.
	Persistence Persistence `json:"persistence"`
	// KeptUntil is, for everysec, when the AOF sizes it was cut back to
	// were sampled: at or before the crash minus one second.
	KeptUntil time.Time `json:"kept_until,omitzero"`
	// CutBytes and CutCommands are what was cut from the AOF's incr files
	// (commands are writes; MULTI, EXEC and SELECT are not counted).
	CutBytes    int64 `json:"cut_bytes"`
	CutCommands int64 `json:"cut_commands"`
	// CutFiles names the incr files that were cut.
	CutFiles []string `json:"cut_files,omitempty"`
}

// powerCut is a power loss between its SIGKILL and the cut, which onExit
// applies before the restart path can run.
type powerCut struct {
	proc  *child
	crash time.Time
	done  chan struct{} // closed once res and err are set
	res   PowerLossResult
	err   error
}

// powerLoss is a crash that also loses what the node had not fsynced:
// SIGKILL, then (everysec) the AOF cut back to its size one second before,
// then the usual restart through the guard (post-stop unclean, so the
// restart delay holds). It returns once the cut is done.
func (s *supervisor) powerLoss(ctx context.Context) (FaultResult, error) {
	s.mu.Lock()
	p, prof, err := s.powerLossTargetLocked()
	if err != nil {
		s.mu.Unlock()
		return FaultResult{}, err
	}
	cut := &powerCut{proc: p, crash: time.Now(), done: make(chan struct{})}
	f := s.faults.startLocked(FaultPowerLoss, map[string]string{"persistence": string(prof)})
	s.pendingCut = cut
	s.mu.Unlock()

	signalGroup(p.pid, syscall.SIGKILL)
	select {
	case <-cut.done:
	case <-ctx.Done():
		return FaultResult{}, ctx.Err()
	}
	if cut.err != nil {
		return FaultResult{}, cut.err
	}
	for k, v := range powerLossParams(cut.res) {
		f.Params[k] = v
	}
	res := cut.res
	return FaultResult{Fault: &f, PowerLoss: &res}, nil
}

// powerLossTargetLocked returns the redis-server a power loss would crash
// and the node's persistence profile, or why there is none to crash.
func (s *supervisor) powerLossTargetLocked() (*child, Persistence, error) {
	p := s.proc
	if p == nil {
		return nil, "", s.notRunningLocked()
	}
	prof := s.conf.persistence()
	switch {
	case prof == PersistEverysec && s.aof == nil:
		return nil, "", fmt.Errorf("node %d: power loss: the AOF sampler is not running", s.spec.ID)
	case prof != PersistAlways && prof != PersistEverysec && prof != PersistNone:
		return nil, "", fmt.Errorf("%w: power loss models the profiles always, everysec and none; node %d's redis.conf is %s", ErrInvalid, s.spec.ID, prof)
	}
	return p, prof, nil
}

// applyPowerLoss cuts the AOF after a power loss killed its process and
// keeps what was cut for the fault's end event.
func (s *supervisor) applyPowerLoss(cut *powerCut) {
	defer close(cut.done)
	cut.res = PowerLossResult{Persistence: s.conf.persistence()}
	if cut.res.Persistence == PersistEverysec {
		c, err := s.aof.cutAt(cut.crash, EverysecWindow)
		if err != nil {
			cut.err = err
			s.log.Printf("power loss: %v", err)
		}
		cut.res.KeptUntil = c.KeptAt.UTC()
		cut.res.CutBytes, cut.res.CutCommands, cut.res.CutFiles = c.Bytes, c.Commands, c.Files
		if !c.Exact {
			s.log.Printf("power loss: an incr file did not parse; cut at the sampled size (Redis drops a partial last command)")
		}
	}
	s.log.Printf("power loss (%s): cut %d bytes, %d commands from %v", cut.res.Persistence, cut.res.CutBytes, cut.res.CutCommands, cut.res.CutFiles)
	s.mu.Lock()
	if s.faults.notes == nil {
		s.faults.notes = map[FaultKind]map[string]string{}
	}
	s.faults.notes[FaultPowerLoss] = powerLossParams(cut.res)
	s.mu.Unlock()
}

// powerLossParams are a power loss's parameters in faults.jsonl.
func powerLossParams(r PowerLossResult) map[string]string {
	p := map[string]string{
		"cut_bytes":    strconv.FormatInt(r.CutBytes, 10),
		"cut_commands": strconv.FormatInt(r.CutCommands, 10),
	}
	if !r.KeptUntil.IsZero() {
		p["kept_until"] = r.KeptUntil.Format(time.RFC3339Nano)
	}
	if len(r.CutFiles) > 0 {
		p["cut_files"] = strings.Join(r.CutFiles, ",")
	}
	return p
}

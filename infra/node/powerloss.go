package node

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
)

// PowerLossResult says what a power loss took from a node.
type PowerLossResult struct {
	// Model is how the loss was decided: PowerLossFilesystem, what the
	// server had not fsynced, from its real fsync calls.
	Model string `json:"model"`
	// Persistence is the node's profile, which decides what it fsyncs:
	// always before acknowledging, everysec about once a second, no-fsync
	// and none never.
	Persistence Persistence `json:"persistence"`
	// CutBytes are the bytes cut off the ends of files and those written
	// back where unsynced writes had overwritten durable ones; CutCommands
	// the write commands the AOF's incr files held before the cut and not
	// after (MULTI, EXEC and SELECT are not counted), that is acknowledged
	// writes lost (etcd members: not counted).
	CutBytes    int64 `json:"cut_bytes"`
	CutCommands int64 `json:"cut_commands"`
	// CutFiles names the files that were cut back.
	CutFiles []string `json:"cut_files,omitempty"`
	// Vanished and Returned name what a cut took away (created or renamed
	// to, never made durable by a directory fsync) and gave back (unlinked
	// or renamed away, never made durable).
	Vanished []string `json:"vanished,omitempty"`
	Returned []string `json:"returned,omitempty"`
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
// SIGKILL, then the power cut on its disk (the power-loss filesystem), then
// the usual restart through the guard (post-stop unclean, so the restart
// delay holds). It returns once the cut is done.
func (s *supervisor) powerLoss(ctx context.Context) (FaultResult, error) {
	s.mu.Lock()
	p, prof, err := s.powerLossTargetLocked()
	if err != nil {
		s.mu.Unlock()
		return FaultResult{}, err
	}
	cut := &powerCut{proc: p, crash: time.Now(), done: make(chan struct{})}
	f := s.faults.startLocked(fault.PowerLoss, map[string]string{"persistence": string(prof)})
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
	if s.disk.fs == nil {
		return nil, "", fmt.Errorf("node %d: power loss needs the power-loss filesystem: %w", s.spec.ID, s.disk.err)
	}
	// The filesystem keeps what was fsynced, whatever the profile.
	return p, s.conf.persistence(), nil
}

// applyPowerLoss cuts the disk after a power loss killed its process (a
// machine's: the whole machine) and keeps what was cut for the fault's end
// event.
func (s *supervisor) applyPowerLoss(cut *powerCut) {
	defer close(cut.done)
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	before := aofWrites(s.conf)
	cut.res, cut.err = s.disk.cut(ctx)
	cancel()
	cut.res.Persistence = s.conf.persistence()
	if n := before - aofWrites(s.conf); n > 0 {
		cut.res.CutCommands = n // the acknowledged writes the cut took
	}
	if cut.err != nil {
		s.log.Printf("power loss: %v", cut.err)
	}
	s.log.Printf("power loss (%s, %s model): cut %d bytes, %d commands from %v; vanished %v, returned %v", cut.res.Persistence, cut.res.Model, cut.res.CutBytes, cut.res.CutCommands, cut.res.CutFiles, cut.res.Vanished, cut.res.Returned)
	s.mu.Lock()
	if s.faults.notes == nil {
		s.faults.notes = map[FaultKind]map[string]string{}
	}
	s.faults.notes[fault.PowerLoss] = powerLossParams(cut.res)
	s.mu.Unlock()
}

// powerLossParams are a power loss's parameters in faults.jsonl.
func powerLossParams(r PowerLossResult) map[string]string {
	p := map[string]string{
		"model":        r.Model,
		"cut_bytes":    strconv.FormatInt(r.CutBytes, 10),
		"cut_commands": strconv.FormatInt(r.CutCommands, 10),
	}
	if len(r.Vanished) > 0 {
		p["vanished"] = strings.Join(r.Vanished, ",")
	}
	if len(r.Returned) > 0 {
		p["returned"] = strings.Join(r.Returned, ",")
	}
	if len(r.CutFiles) > 0 {
		p["cut_files"] = strings.Join(r.CutFiles, ",")
	}
	return p
}

package node

import (
	"context"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/fault"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PowerLossResult says what a power loss took from a node.
type PowerLossResult struct {
	// Model is how the loss was decided: PowerLossFilesystem (what the
	// server had not fsynced, from its real fsync calls) or
	// PowerLossAOFSampling (machines: the AOF cut back by the profile).
	Model string `json:"model"`
	// Persistence is the node's profile, which decides what is lost:
	// always loses nothing acknowledged, everysec the last second of
	// writes, none everything.
	Persistence Persistence `json:"persistence"`
	// KeptUntil is, for everysec, when the AOF sizes it was cut back to
	// were sampled: at or before the crash minus one second.
	KeptUntil time.Time `json:"kept_until,omitzero"`
	// CutBytes and CutCommands are what was cut from the AOF's incr files
	// (commands are writes; MULTI, EXEC and SELECT are not counted): on
	// the filesystem model, the write commands the AOF held before the cut
	// and not after, that is acknowledged writes lost.
	CutBytes    int64 `json:"cut_bytes"`
	CutCommands int64 `json:"cut_commands"`
	// CutFiles names the files that were cut back (filesystem model:
	// CutBytes counts the bytes cut off their ends and those written back
	// where unsynced writes had overwritten durable ones; CutCommands is
	// not counted).
	CutFiles []string `json:"cut_files,omitempty"`
	// Vanished and Returned (filesystem model) name what a cut took away
	// (created or renamed to, never made durable by a directory fsync) and
	// gave back (unlinked or renamed away, never made durable).
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
// SIGKILL, then the power cut on its disk (the power-loss filesystem; on a
// machine, everysec: the AOF cut back to its size one second before), then
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
	prof := s.conf.persistence()
	switch {
	case s.mach == nil && s.disk.fs == nil:
		return nil, "", fmt.Errorf("lab: node %d: power loss needs the power-loss filesystem: %w", s.spec.ID, s.disk.err)
	case s.mach == nil:
		return p, prof, nil // the filesystem keeps what was fsynced, whatever the profile
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
	cut.res = PowerLossResult{Model: PowerLossAOFSampling, Persistence: s.conf.persistence()}
	if s.mach == nil {
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
	} else if cut.res.Persistence == PersistEverysec {
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
	s.log.Printf("power loss (%s, %s model): cut %d bytes, %d commands from %v; vanished %v, returned %v", cut.res.Persistence, cut.res.Model, cut.res.CutBytes, cut.res.CutCommands, cut.res.CutFiles, cut.res.Vanished, cut.res.Returned)
	s.mu.Lock()
	if s.faults.notes == nil {
		s.faults.notes = map[FaultKind]map[string]string{}
	}
	s.faults.notes[fault.PowerLoss] = powerLossParams(cut.res)
	s.mu.Unlock()
}

// aofWrites counts the write commands in the AOF's incr files as they are
// now (0 without an AOF): before and after a cut, what the cut took.
func aofWrites(c redisConf) int64 {
	files, err := readAOFManifest(filepath.Join(c.aofDir(), c.aofManifest()))
	if err != nil {
		return 0
	}
	var n int64
	for _, name := range files.incr {
		f, err := os.Open(filepath.Join(c.aofDir(), name))
		if err != nil {
			continue
		}
		cmds, _ := aofCommands(f)
		f.Close()
		for _, cmd := range cmds {
			if cmd.write {
				n++
			}
		}
	}
	return n
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
	if !r.KeptUntil.IsZero() {
		p["kept_until"] = r.KeptUntil.Format(time.RFC3339Nano)
	}
	if len(r.CutFiles) > 0 {
		p["cut_files"] = strings.Join(r.CutFiles, ",")
	}
	return p
}

package node

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
)

// powerCut is a power loss between its SIGKILL and the cut, which onExit
// applies before the restart path can run.
type powerCut struct {
	proc  *child
	crash time.Time
	done  chan struct{} // closed once res and err are set
	res   fault.PowerLossResult
	err   error
}

// powerLoss is a crash that also loses what the daemon had not fsynced:
// SIGKILL, then the power cut on its disk (the power-loss filesystem),
// then the restart after the restart delay, as after any crash (a Redis
// node's guard holds it: post-stop unclean). It returns once the cut is
// done.
func (d *daemon) powerLoss(ctx context.Context, params map[string]string) (*Fault, *fault.PowerLossResult, error) {
	d.mu.Lock()
	p, err := d.powerLossTargetLocked()
	if err != nil {
		d.mu.Unlock()
		return nil, nil, err
	}
	cut := &powerCut{proc: p, crash: time.Now(), done: make(chan struct{})}
	f := d.faults.startLocked(fault.PowerLoss, d.powerLossNote(params))
	d.pendingCut = cut
	d.mu.Unlock()

	signalGroup(p.pid, syscall.SIGKILL)
	select {
	case <-cut.done:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	if cut.err != nil {
		return nil, nil, cut.err
	}
	maps.Copy(f.Params, powerLossParams(cut.res))
	res := cut.res
	return &f, &res, nil
}

// powerLossNote is params with the daemon's persistence profile, which
// decides what it fsyncs, when it has one.
func (d *daemon) powerLossNote(params map[string]string) map[string]string {
	if d.persistence != "" {
		params["persistence"] = string(d.persistence)
	}
	return params
}

// powerLossTargetLocked returns the process a power loss would crash, or
// why there is none to crash.
func (d *daemon) powerLossTargetLocked() (*child, error) {
	p := d.proc
	if p == nil {
		return nil, d.notRunningLocked()
	}
	if d.disk.fs == nil {
		return nil, d.errorf("power loss needs the power-loss filesystem: %w", d.disk.err)
	}
	return p, nil
}

// applyPowerLoss cuts the disk after a power loss killed its process (a
// machine's: the whole machine) and keeps what was cut for the fault's end
// event.
func (d *daemon) applyPowerLoss(cut *powerCut) {
	defer close(cut.done)
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	var before int64
	if d.acked != nil {
		before = d.acked()
	}
	cut.res, cut.err = d.disk.cut(ctx)
	cancel()
	// The filesystem keeps what was fsynced, whatever the profile.
	cut.res.Persistence = string(d.persistence)
	if d.acked != nil {
		if n := before - d.acked(); n > 0 {
			cut.res.CutCommands = n // the acknowledged writes the cut took
		}
	}
	if cut.err != nil {
		d.log.Printf("power loss: %v", cut.err)
	}
	model := cut.res.Model + " model"
	if cut.res.Persistence != "" {
		model = cut.res.Persistence + ", " + model
	}
	d.log.Printf("power loss (%s): cut %d bytes, %d commands from %s; vanished %s, returned %s", model, cut.res.CutBytes, cut.res.CutCommands, listWords(cut.res.CutFiles), listWords(cut.res.Vanished), listWords(cut.res.Returned))
	d.mu.Lock()
	if d.faults.notes == nil {
		d.faults.notes = map[FaultKind]map[string]string{}
	}
	d.faults.notes[fault.PowerLoss] = powerLossParams(cut.res)
	d.mu.Unlock()
}

// powerLossParams are a power loss's parameters in faults.jsonl.
func powerLossParams(r fault.PowerLossResult) map[string]string {
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

// listWords is a list as people write it, "none" when empty.
func listWords(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ", ")
}

package node

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/internal/flock"
	"github.com/redlocklab/redlocklab/internal/proc"
)

// A lab may have an owner: the process it was brought up for (a drill).
// Every supervisor of the lab watches it, and when it is gone (killed, even
// by SIGKILL, which leaves it no chance to take its lab down), the lab goes
// down on its own: the first supervisor to notice starts `redlab lab down`
// for the state directory, detached, and every supervisor also stops its
// own node and exits, so that nothing keeps running even if that down
// fails. A lab without an owner (one a user brought up) stays up.

// The state directory's files of the owner (infra/lab writes OwnerFile;
// the rest are the supervisors' and lab down removes them).
const (
	OwnerFile = "owner.json"
	// OwnerGoneLock guards OwnerGoneFile: only one supervisor starts the
	// down.
	OwnerGoneLock = ".owner.lock"
	// OwnerGoneFile says a supervisor found the owner gone and started
	// `redlab lab down`, whose output it holds.
	OwnerGoneFile = "owner-gone.log"
)

// ownerPoll is how often a supervisor looks at its owner.
const ownerPoll = 500 * time.Millisecond

// Owner names one process by its pid and its start time (see
// proc.StartTime): a pid reused by a later process is not the owner.
type Owner struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// OwnerOf is the running process pid as an owner.
func OwnerOf(pid int) (Owner, error) {
	start, err := proc.StartTime(pid)
	if err != nil {
		return Owner{}, fmt.Errorf("node: owner pid %d: no such process: %w", pid, err)
	}
	return Owner{PID: pid, Start: start}, nil
}

// Alive reports whether the owner still runs: its pid is alive and has the
// same start time.
func (o Owner) Alive() bool {
	start, err := proc.StartTime(o.PID)
	return err == nil && start == o.Start && proc.Alive(o.PID)
}

// WriteOwner records o as the owner of the lab in stateDir (nil: none,
// the file is removed). Supervisors read it on every poll, so a later
// `lab up` changes the owner of running supervisors too.
func WriteOwner(stateDir string, o *Owner) error {
	p := filepath.Join(stateDir, OwnerFile)
	if o == nil {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("node: %w", err)
		}
		return nil
	}
	if err := atomicfile.WriteJSON(p, o, 0o644); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}

// ReadOwner returns the owner of the lab in stateDir, nil when it has none.
func ReadOwner(stateDir string) (*Owner, error) {
	var o Owner
	if err := readJSONFile(filepath.Join(stateDir, OwnerFile), &o); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("node: owner: %w", err)
	}
	if o.PID <= 0 {
		return nil, fmt.Errorf("node: owner: pid %d", o.PID)
	}
	return &o, nil
}

// watchOwner polls the lab's owner until ctx ends; once the owner is gone
// it takes the lab down (ownerGone) and calls stop, which ends the
// supervisor. It runs in a goroutine counted in the supervisor's wait
// group.
func watchOwner(ctx context.Context, stateDir string, logger *log.Logger, stop context.CancelFunc) {
	t := time.NewTicker(ownerPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		o, err := ReadOwner(stateDir)
		if err != nil {
			// A damaged file names nobody: the lab stays, as without an owner.
			continue
		}
		if o == nil || o.Alive() {
			continue
		}
		logger.Printf("the lab's owner, pid %d, is gone: the lab goes down with it", o.PID)
		if err := ownerGone(ctx, stateDir, logger); err != nil {
			logger.Printf("owner gone: %v", err)
		}
		stop()
		return
	}
}

// ownerGone starts `redlab lab down --state-dir stateDir` detached (its own
// session, output in OwnerGoneFile), unless another supervisor of the lab
// already has.
func ownerGone(ctx context.Context, stateDir string, logger *log.Logger) error {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	unlock, err := flock.Lock(lctx, filepath.Join(stateDir, OwnerGoneLock))
	if err != nil {
		return err
	}
	defer unlock()
	marker := filepath.Join(stateDir, OwnerGoneFile)
	if fileExists(marker) {
		return nil // another supervisor started the down
	}
	redlab, err := os.Executable()
	if err != nil {
		return fmt.Errorf("redlab binary: %w", err)
	}
	out, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	fmt.Fprintf(out, "%s: pid %d found the owner gone; running %s lab down --state-dir %s\n",
		time.Now().UTC().Format(time.RFC3339), os.Getpid(), redlab, stateDir)
	cmd := exec.Command(redlab, "lab", "down", "--state-dir", stateDir)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = out, out
	// Its own session: it outlives this supervisor, which lab down stops.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start lab down: %w", err)
	}
	logger.Printf("lab down started, pid %d (output in %s)", cmd.Process.Pid, marker)
	_ = cmd.Process.Release() // not waited for: it outlives us
	return nil
}

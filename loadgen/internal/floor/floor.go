// Package floor measures what the machine under a capacity run physically
// allows, for scripts/capacity.sh to set each knee against: how many small
// fsynced appends per second the lab's filesystem takes (Disk), and how many
// lock+unlock cycles per second the least a Redlock must do over the nodes
// can reach (Fanout); and what a reservation costs a process that does
// only what one must (Client), against which the load generator's own CPU
// per reservation is read. It owns floor.json, where a run keeps them.
//
// With appendfsync always, each lock+unlock is two fsynced writes on every
// node (the SET and the compare-and-delete), so the disk bounds everything
// above it; Redis folds the writes of one event-loop pass into one fsync,
// so with many clients waiting the fan-out floor may pass half the disk's
// rate, but it moves with it. With everysec the disk is out of the request
// path and the floor is the network round trips and the servers' CPU.
package floor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/redlocklab/redlocklab/internal/atomicfile"
)

// File is floor.json: the disk, measured once per run, the fan-out floor
// for each appendfsync policy the lab ran with, and the bare client at
// each setup's knee.
type File struct {
	Disk   []Disk            `json:"disk,omitempty"`
	Fanout map[string]Fanout `json:"fanout,omitempty"` // by appendfsync policy
	Client map[string]Client `json:"client,omitempty"` // by setup, PATH:FSYNC
}

// DiskFor returns the disk run with this many writers.
func (f *File) DiskFor(writers int) (Disk, bool) {
	for _, d := range f.Disk {
		if d.Writers == writers {
			return d, true
		}
	}
	return Disk{}, false
}

// Read reads the floor.json at path; a missing file is an empty File.
func Read(path string) (*File, error) {
	f := &File{}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, fmt.Errorf("floor: %s: %w", path, err)
	}
	return f, nil
}

// Update reads the floor.json at path (or starts an empty one), lets
// change fill in what was measured, and writes it back, so that the
// script can record the disk and each policy's fan-out as it goes.
func Update(path string, change func(*File)) error {
	f, err := Read(path)
	if err != nil {
		return err
	}
	change(f)
	return atomicfile.WriteJSON(path, f, 0o644)
}

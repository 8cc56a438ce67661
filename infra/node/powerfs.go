package node

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/fault"
	"log"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/internal/powerfs"
)

// PowerLossFilesystem is the power-loss model, as a power-loss fault's
// result and result.json name it: the node's data directory is a powerfs
// mount (internal/powerfs, after Jepsen's lazyfs), and a power loss keeps
// exactly what the server fsynced, file data and directory entries. Every
// Redis node (a machine's too: machinedisk.go) and etcd member.
const PowerLossFilesystem = "filesystem"

// ErrPlainDisk is why a power loss is refused on a node or member whose
// spec says PlainDisk.
var ErrPlainDisk = errors.New("node: the data directory is a plain directory, not the power-loss filesystem (the lab came up without --power-loss)")

// disk is a node's data directory as a power-loss filesystem. A process
// whose supervisor died cannot keep it: the mount died with the supervisor
// that served it.
type disk struct {
	fs  *powerfs.FS
	err error // why there is none: a power loss is refused with it
}

// mountDisk mounts dir as the node's power-loss filesystem. orphans lists
// servers a dead supervisor left running on the dead mount: they are
// killed first (their disk is gone), then the dead mount is swept.
// With plain, dir stays a plain directory: only a dead mount is ended.
// allowOther lets users other than root in (a machine's redis-server runs
// as redis).
func mountDisk(dir string, plain, allowOther bool, lg *log.Logger, orphans func() []int) disk {
	// sweep ends a dead mount a crashed supervisor left on dir.
	sweep := func() {
		if swept, err := powerfs.Sweep(dir); err != nil {
			lg.Printf("power loss: %v", err)
		} else if len(swept) > 0 {
			lg.Printf("power loss: ended the dead mount at %s", strings.Join(swept, ", "))
		}
	}
	if plain {
		sweep()
		lg.Printf("power loss: the data directory is plain; power-loss faults are refused")
		return disk{err: ErrPlainDisk}
	}
	if err := powerfs.Available(); err != nil {
		sweep()
		lg.Printf("power loss: %v; power-loss faults are refused on this node", err)
		return disk{err: err}
	}
	for _, pid := range orphans() {
		lg.Printf("killing pid %d, left on a dead power-loss mount by a previous supervisor", pid)
		signalGroup(pid, syscall.SIGKILL)
	}
	for i := 0; i < 100 && len(orphans()) > 0; i++ {
		time.Sleep(pollInterval)
	}
	sweep()
	// Journal: the nodes' disks in production are ext4 or xfs, whose
	// journal commits names with any fsync; Redis and etcd rely on it.
	f, err := powerfs.Mount(dir, powerfs.Options{Journal: true, AllowOther: allowOther})
	if err != nil {
		lg.Printf("power loss: %v; power-loss faults are refused on this node", err)
		return disk{err: err}
	}
	lg.Printf("power loss: %s is a power-loss filesystem (only what is fsynced survives a cut)", dir)
	return disk{fs: f}
}

// close unmounts and gives the directory its files back, as they are.
func (d disk) close(lg *log.Logger) {
	if d.fs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := d.fs.Close(ctx); err != nil {
		lg.Printf("power loss: %v", err)
	}
}

// cut is the power cut on a disk whose writers are dead.
func (d disk) cut(ctx context.Context) (fault.PowerLossResult, error) {
	if d.fs == nil {
		return fault.PowerLossResult{}, fmt.Errorf("node: power loss needs the power-loss filesystem: %w", d.err)
	}
	r, err := d.fs.Cut(ctx)
	return fault.PowerLossResult{
		Model:    PowerLossFilesystem,
		CutBytes: r.Truncated + r.Restored, CutFiles: r.Files,
		Vanished: r.Vanished, Returned: r.Returned,
	}, err
}

// diskOrphans are the redis-servers left on the node's data directory by a
// dead supervisor: found by working directory, or by the pid file once a
// sweep detached the mount (a detached directory has no path).
func (s *supervisor) diskOrphans() []int {
	pids := FindRedis(s.conf.dir)
	if pid := readPID(s.spec.path(redisPIDFile)); pid > 0 && !slices.Contains(pids, pid) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.HasPrefix(strings.TrimSpace(string(comm)), "redis-server") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// SweepDisks ends the power-loss mounts under stateDir that dead
// supervisors left; a live one is left alone.
func SweepDisks(stateDir string) error {
	_, err := powerfs.Sweep(stateDir)
	return err
}

// CheckPowerLoss says why this host cannot run a power-loss fault, or nil
// when it can.
func CheckPowerLoss() error { return powerfs.Available() }

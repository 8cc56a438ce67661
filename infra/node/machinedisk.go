package node

import (
	"log"
	"path/filepath"

	"github.com/redlocklab/redlocklab/infra/machine"
)

// A machine node's Redis data directory is a data volume, as on a VM with
// an EBS volume at /var/lib/redis: a host directory (machineDataName in the
// node's directory) that the machine sees at redis.conf's dir
// (machine.Config.Binds). That host directory is the node's power-loss
// filesystem, served by the supervisor like a process node's, so that a
// power cut keeps what the machine's redis-server fsynced and nothing
// else. It is mounted before the first boot and stays mounted across
// boots; every boot binds the mount that is there then (a cut remounts it).
//
// It is not mounted inside the machine's root: the root is an overlay, and
// the power-loss filesystem moves the directory it is mounted on, which an
// overlay refuses for a directory of its lower layer (the image's
// /var/lib/redis) unless the kernel redirects directories.
//
// With PlainDisk the data stays on the machine's root file system, and a
// power loss is refused (ErrPlainDisk).

// machineDataName is a machine node's data volume in its directory.
const machineDataName = "redis-data"

// machineDataDir is where a machine node's data directory (confDir, as
// redis.conf names it inside the machine) is on this host.
func machineDataDir(s Spec, confDir string) string {
	if s.PlainDisk {
		return filepath.Join(machineRoot(s), confDir)
	}
	return s.path(machineDataName)
}

// machineBinds are the binds a machine node boots with: its data volume at
// redis.conf's dir, unless its disk is plain.
func machineBinds(s Spec) []machine.Bind {
	if s.PlainDisk {
		return nil
	}
	return []machine.Bind{{Host: s.path(machineDataName), Path: parseRedisConf(s.Conf).dir}}
}

// mountMachineDisk mounts a machine node's data volume (hostDir) as its
// power-loss filesystem, open to the machine's redis user. The machine a
// dead supervisor left, which held the dead mount, is gone already
// (sweepMachine).
func mountMachineDisk(s Spec, hostDir string, lg *log.Logger) disk {
	return mountDisk(hostDir, s.PlainDisk, true, lg, func() []int { return nil })
}

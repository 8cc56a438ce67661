// Package machine boots Debian 12 machines as systemd-nspawn containers, so
// that a node's user data runs the way it runs on a VM: cloud-init reads it
// from a NoCloud seed, systemd is PID 1 and starts the units it wrote.
//
// An Image is a Debian 12 root file system built once per host with
// debootstrap and kept under a cache directory (DefaultCacheDir), keyed by
// a hash of everything that goes into it; building it needs Debian's package
// archive, using it does not. Each Machine boots an overlay of its own on
// top of that read-only root, so a machine's disk survives a power cut (a
// second Start of the same Machine) and machines never see each other's
// files.
//
// What differs from a VM, on purpose:
//
//   - Machines share the host's network namespace (no --network-veth): each
//     binds its own loopback address, and the host reaches it directly;
//     or, with Config.NetNS, they run in a namespace their owner made
//     (with its veth pair and addresses: package node, machinenet.go).
//     cloud-init's network configuration is therefore off, and its only
//     data source is the NoCloud seed (nothing probes a metadata service).
//   - openssh-server is installed, without host keys: ssh.service runs only
//     on a machine whose owner wrote one into its root (Config.Files), so
//     no two machines share a key; cloud-init keeps the keys it finds.
//   - chronyd runs with -x: it synchronises and reports like on a VM but never
//     sets the clock, which belongs to the host. Its unit's
//     ConditionCapability=CAP_SYS_TIME is reset, since a container has no
//     CAP_SYS_TIME.
//   - Debian's redis-server.service is not enabled in the image (on a VM it
//     starts when the package is installed, before the user data masks it;
//     here it would bind the host's 127.0.0.1:6379).
//   - APT has no sources: the packages the user data asks for are already
//     installed, and nothing is downloaded at boot. The image holds what a
//     Debian cloud image holds and those packages, nothing more
//     (UserDataPackages), so a program the user data forgets to install is
//     missing in the lab as on a VM.
//   - Devices: a container has no udev, so a data volume (a block device in
//     /etc/fstab) cannot be mounted. A host directory can stand in for one
//     (Config.Binds); without it, data stays on the root file system.
//
// Each systemd-nspawn runs as PID 1 of a PID namespace of its own and dies
// with the process that started it (Pdeathsig), which takes its container
// with it: a test that panics leaves no machine behind. Machines are not
// registered with systemd-machined (the host may not run systemd), so
// machinectl does not list them; Exec enters one with nsenter.
package machine

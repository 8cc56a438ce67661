// Package lab runs the local Redlock lab: N independent redis-server nodes on
// one machine, provisioned by OpenTofu or Terraform (infra/envs/local, driven
// through terraform-exec), each supervised by `redlab node run` and fronted by
// a fault front (internal/faultproxy) so that the network can be faulted
// without root.
//
// The pieces:
//
//   - Terraform drives init/apply/output/destroy of the root module.
//   - Up and Down create and tear down a lab in a state directory; Open
//     attaches to an existing one.
//   - RunNode is the per-node supervisor: restart guard, redis-server,
//     proxy and a loopback HTTP control endpoint that executes faults.
//   - Lab's fault methods (Kill, PowerLoss, Restart, Stop, Start, Pause,
//     Partition, Heal, Latency, ClockJump, ClockRate, Failover) call that endpoint;
//     every fault is recorded with its start and end time, to the
//     nanosecond, in faults.jsonl (package faultlog owns the format;
//     ReadFaults reads a state directory's).
//
// ACLs are on, as on a real VM (see Credentials): clients log in as
// "redlock" (locks) or "monitor" (reads); the lab-only "admin" is the
// supervisor's. The passwords live in the state directory's
// credentials.json (CredentialsFile, mode 0600); commands find it through
// $REDLAB_CREDENTIALS (CredentialsEnv) and read it with ReadCredentials.
//
// Ports: node N's proxy (the address clients use) listens on BasePort+N,
// its redis-server on BasePort+100+N and its control endpoint on
// BasePort+200+N, all on 127.0.0.1.
//
// Replicas (Config.Replicas 1) build the topology Redlock's docs warn
// against, to show what it costs: every node becomes a master with one
// asynchronous replica, a second redis-server on BasePort+300+N (files under
// nodeN/replica/, its redis.conf the master's with its own port and
// directory, so the same ACL users) run by the node's supervisor. The
// replica follows its master through a proxy of its own on BasePort+400+N,
// so that replication can be held back. It logs in to the master as the
// lab's admin user (masteruser/masterauth set at runtime, never written to a
// file); a real deployment would give replication its own user with +psync
// +replconf +ping. Failover crashes a node's master, promotes the replica
// and points the node's proxy at it: clients keep the address, as behind
// Sentinel or a managed endpoint. The crashed process comes back after the
// restart delay as the replica of the promoted one (the supervisor keeps the
// roles, as Sentinel would), so a second failover swaps them back. After a
// failover the faults that act on redis-server (kill, power-loss, pause,
// stop, restart, clock-jump, clock-rate) still act on the node's original
// process, which is then the replica; the network faults act on the node's
// address, so on the promoted master.
//
// Machines (Config.Machines, `redlab lab up --machines`) make every node a
// Debian 12 systemd-nspawn machine (package infra/machine) booted from the
// cloud-init user data infra/modules/redis-node renders (infra/envs/local
// with machines = true): redlock-redis.service, chrony and the restart guard
// run under real systemd, with the VM's paths. The lab's differences are
// module inputs: the machine's own loopback address (127.80.x.y, x.y the
// two bytes of the node's proxy port, so two labs never share one), the
// redis port BasePort+100+N, the lab's admin user (lab_admin_password), the
// exact restart delay, and an NTP source: the node's supervisor runs a
// `chronyd -x` on 127.81.x.y, started before the machine boots and stopped
// after it is gone. The supervisor owns the machine (it boots it; the
// machine dies with it) and keeps the front, the control endpoint and the
// fault records, with the same meaning as for processes. kill is a SIGKILL
// of redis-server's host PID (systemd restarts it through the guard, which
// waits the delay); restart is `systemctl restart` (delay 0 only: it starts
// at once); power-loss cuts the machine's power, applies the everysec AOF
// cut to the files on its disk, and boots it again (the guard waits: the
// boot marker on tmpfs is gone); stop and start are systemctl's; pause is
// SIGSTOP of the host PID; the network faults stay at the front.
// clock-jump, clock-rate and failover are refused (ErrUnsupported) before
// anything changes. Machines need root, systemd-nspawn, nsenter, chronyd
// and debootstrap (CheckMachineHost); the first boot of a lab takes tens of
// seconds (cloud-init, chrony's first update, the guard's wait). Down
// removes every machine, mount, NTP server and file.
//
// etcd members (Config.Etcd, `redlab lab up --etcd 3`) run next to the
// nodes: each one an etcd process behind a client front and a peer front,
// supervised and faulted through its own control endpoint like a node; the
// fault target TargetLeader is the member that leads when the fault fires.
// See etcd.go (ports, files) and etcdsupervisor.go (semantics).
//
// Persistence is per node (Config.NodePersistence): always, everysec or
// none. A kill -9 of redis-server keeps the writes it already handed to the
// kernel (they sit in the page cache), so a kill cannot tell appendfsync
// always from everysec. PowerLoss can: it also loses what was not fsynced.
// Under always nothing acknowledged is lost; under everysec the supervisor,
// which samples the size of the AOF's incr files every 50 ms, cuts them back
// to their size one second before the crash (at a command boundary); under
// none every key is lost, as after any restart.
package lab

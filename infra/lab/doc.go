// Package lab runs the local Redlock lab: N independent redis-server nodes on
// one machine, provisioned by OpenTofu or Terraform (infra/envs/local, driven
// through terraform-exec), each supervised by `redlab node run` (package
// node) and fronted by a fault front (internal/faultproxy) so that the
// network can be faulted without root.
//
// The pieces:
//
//   - Terraform drives init/apply/output/destroy of the root module.
//   - Up and Down create and tear down a lab in a state directory; Open
//     attaches to an existing one.
//   - Lab's fault methods (Kill, PowerLoss, Restart, Stop, Start, Pause,
//     Partition, Heal, Latency, ClockJump, ClockRate, Failover) ask each
//     node's supervisor, through its control endpoint; every fault is
//     recorded with its start and end time, to the nanosecond, in
//     faults.jsonl (package faultlog owns the format; Lab.Faults reads it).
//   - StartMonitoring runs Prometheus and an exporter per node against the
//     lab, with the rules and dashboards of package dashboards.
//
// The status and result types of the fault methods (NodeStatus,
// FaultResult, …) are package node's, named here as well (nodes.go).
//
// ACLs are on, as on a real VM (see node.Credentials): clients log in as
// "redlock" (locks) or "monitor" (reads); the lab-only "admin" is the
// supervisor's. The passwords live in the state directory's
// credentials.json (mode 0600); commands find it through $REDLAB_CREDENTIALS
// (CredentialsEnv) and read it with node.ReadCredentials.
//
// Ports: node N's proxy (the address clients use) listens on BasePort+N,
// its redis-server on BasePort+100+N and its control endpoint on
// BasePort+200+N, all on 127.0.0.1 (layout.go has every range).
//
// Replicas (Config.Replicas 1) build the topology Redlock's docs warn
// against, to show what it costs: every node becomes a master with one
// asynchronous replica, and Failover crashes a node's master and promotes
// the replica behind the node's address, as Sentinel or a managed endpoint
// would (package node, replica.go, says how).
//
// Machines (Config.Machines, `redlab lab up --machines`) make every node a
// Debian 12 systemd-nspawn machine (package infra/machine) booted from the
// cloud-init user data infra/modules/redis-node renders (infra/envs/local
// with machines = true): redlock-redis.service, chrony and the restart guard
// run under real systemd, with the VM's paths. The lab's differences are
// module inputs: the machine's own loopback address (machineAddresses), the
// redis port BasePort+100+N, the lab's admin user, the exact restart delay,
// and an NTP source the node's supervisor serves. What each fault does on a
// machine, and which it refuses (ErrUnsupported) before anything changes:
// package node, machine.go. Machines need root, systemd-nspawn, nsenter,
// chronyd and debootstrap (node.CheckMachineHost); the first boot of a lab
// takes tens of seconds (cloud-init, chrony's first update, the guard's
// wait). Down removes every machine, mount, NTP server and file. With SSH
// (Config.SSH, `lab up --machines --ssh`) each machine also gets a network
// namespace of its own and an sshd, and the lab writes a hosts inventory
// of them (ssh.go, layout.go).
//
// etcd members (Config.Etcd, `redlab lab up --etcd 3`) run next to the
// nodes: each one an etcd process behind a client front and a peer front,
// supervised and faulted through its own control endpoint like a node; the
// fault target TargetLeader is the member that leads when the fault fires.
// See layout.go (ports) and package node, etcd.go (semantics).
//
// Persistence is per node (Config.NodePersistence): always, everysec or
// none. A kill -9 of redis-server keeps the writes it already handed to the
// kernel (they sit in the page cache), so a kill cannot tell appendfsync
// always from everysec. PowerLoss can: it also loses what was not fsynced
// (under always nothing acknowledged, under everysec the last second, under
// none every key; package node, aof.go, has the model).
package lab

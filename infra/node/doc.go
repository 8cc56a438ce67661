// Package node is the per-node supervisor of the lab (package infra/lab):
// `redlab node run` runs one Redis node, `redlab node etcd-run` one etcd
// member, each from the files the lab's Terraform provisioners wrote into
// the state directory (Prepare, PrepareEtcdMember), so that a supervisor can
// be restarted from disk alone.
//
// A node's supervisor (Run) runs redis-server through the rendered restart
// guard, keeps a fault front (internal/faultproxy) on the node's address,
// and serves a control endpoint on loopback that applies faults and records
// them in the state directory's faults.jsonl (package faultlog). Start and
// Stop run and stop supervisors from outside, detached from the caller.
// Where each part is explained:
//
//   - daemon.go: the life every supervisor shares (start, restart hold,
//     owner watch, control endpoint, fronts, power-loss layer, stop), of
//     which a node's and an etcd member's supervisor are the two kinds;
//   - outside.go: a supervisor from outside: started detached, awaited,
//     stopped, and what a dead one left swept;
//   - supervisor.go: the node's supervision (restart guard, adoption of a
//     redis-server left by a crashed supervisor, the first start's delay);
//   - process.go: the processes a supervisor runs, adopts or finds;
//   - control.go, client.go: the control endpoint and its client (Control),
//     the one owner of its paths and error codes (its bodies are package
//     fault's Params and Result);
//   - faults.go: the fault recorder and the faults that act on the process
//     or the fronts, every daemon's;
//   - inject.go: the lab's three fault targets (process nodes, machine
//     nodes, etcd members), each a table of how it applies each kind;
//   - replica.go: a replicated node's pair of redis-servers, its roles, and
//     failover;
//   - machine.go, machinedisk.go: a node booted as a systemd-nspawn machine,
//     what each fault does there, and its data volume;
//   - powerloss.go, powerfs.go, aofcount.go: power loss on the power-loss
//     filesystem, and the acknowledged writes a cut took;
//   - clock.go: the clock-jump and clock-rate models;
//   - metrics.go: the supervisor's /metrics;
//   - etcd.go, etcdmember.go: the etcd member supervisor and its files.
//
// The state directory's files are this package's: the spec, status
// (node.json, member.json) and pid files of every node and member, read by
// the lab through LoadSpec, LastStatus, Ports and Prepared, and the
// credentials file (Credentials).
//
// A replicated node (Spec.ReplicaPort) keeps its replica's files under
// nodeN/replica/ (replica.conf is the master's redis.conf with its own port
// and directory, so the same ACL users); the replica logs in to its master
// as the lab's admin (masteruser/masterauth set at runtime, never written to
// a file), where a real deployment would give replication its own user with
// +psync +replconf +ping. After a failover the faults that act on
// redis-server (kill, power-loss, pause, stop, restart, clock-jump,
// clock-rate) still act on the node's original process, which is then the
// replica; the network faults act on the node's address, so on the
// promoted master.
package node

// Package lab runs the local Redlock lab: N independent redis-server nodes on
// one machine, provisioned by OpenTofu or Terraform (infra/envs/local, driven
// through terraform-exec), each supervised by `redlab node run` and fronted by
// a Toxiproxy listener so that the network can be faulted without root.
//
// The pieces:
//
//   - Terraform drives init/apply/output/destroy of the root module.
//   - Up and Down create and tear down a lab in a state directory; Open
//     attaches to an existing one.
//   - RunNode is the per-node supervisor: restart guard, redis-server,
//     proxy and a loopback HTTP control endpoint that executes faults.
//   - Lab's fault methods (Kill, Restart, Stop, Start, Pause, Partition,
//     Heal, Latency, ClockJump, ClockRate) call that endpoint; every fault
//     is recorded with its start and end time in faults.jsonl (package
//     faultlog owns the format; ReadFaults reads a state directory's).
//
// Ports: node N's proxy (the address clients use) listens on BasePort+N,
// its redis-server on BasePort+100+N and its control endpoint on
// BasePort+200+N, all on 127.0.0.1.
//
// Power-loss fidelity: a kill -9 of redis-server keeps the writes it already
// handed to the kernel (they sit in the page cache), so the lab cannot tell
// appendfsync always from everysec by killing a process. The "none"
// persistence profile (no AOF, no RDB) models the case that matters: the
// key is gone after a restart.
package lab

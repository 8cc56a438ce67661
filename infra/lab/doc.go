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
//   - Lab's fault methods (Kill, PowerLoss, Restart, Stop, Start, Pause,
//     Partition, Heal, Latency, ClockJump, ClockRate) call that endpoint;
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
// Persistence is per node (Config.NodePersistence): always, everysec or
// none. A kill -9 of redis-server keeps the writes it already handed to the
// kernel (they sit in the page cache), so a kill cannot tell appendfsync
// always from everysec. PowerLoss can: it also loses what was not fsynced.
// Under always nothing acknowledged is lost; under everysec the supervisor,
// which samples the size of the AOF's incr files every 50 ms, cuts them back
// to their size one second before the crash (at a command boundary); under
// none every key is lost, as after any restart.
package lab

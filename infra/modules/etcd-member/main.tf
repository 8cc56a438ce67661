# One etcd member's configuration file (etcd --config-file), provider-agnostic:
# the local lab's supervisor runs etcd with it, a VM would run it from a unit.
# fsync stays on unless unsafe_no_fsync declares a negative control: the
# fencing token a lock hands out (the key's revision) is only as durable as
# the raft log. No resource: the file is an output, checked by its
# preconditions.

locals {
  etcd_conf = yamlencode(merge({
    "name"                        = var.name
    "data-dir"                    = var.data_dir
    "listen-client-urls"          = var.urls.listen_client
    "advertise-client-urls"       = var.urls.advertise_client
    "listen-peer-urls"            = var.urls.listen_peer
    "initial-advertise-peer-urls" = var.urls.advertise_peer
    "initial-cluster"             = join(",", [for n in sort(keys(var.initial_cluster)) : "${n}=${var.initial_cluster[n]}"])
    "initial-cluster-token"       = var.cluster_token
    "initial-cluster-state"       = "new"
    "heartbeat-interval"          = var.heartbeat_ms
    "election-timeout"            = var.election_ms
    "logger"                      = "zap"
    "log-level"                   = "info"
    "unsafe-no-fsync"             = var.unsafe_no_fsync
    }, var.log_file == "" ? {} : {
    "log-outputs" = [var.log_file]
  }))
}

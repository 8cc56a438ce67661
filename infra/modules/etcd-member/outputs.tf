output "etcd_conf" {
  description = "The member's etcd configuration file (YAML, for etcd --config-file)."
  value       = local.etcd_conf

  precondition {
    condition     = lookup(var.initial_cluster, var.name, "") == var.urls.advertise_peer
    error_message = "initial_cluster must map this member's name to urls.advertise_peer."
  }
  precondition {
    condition     = var.election_ms >= 5 * var.heartbeat_ms
    error_message = "election_ms must be at least five heartbeats (etcd refuses less)."
  }
}

output "name" {
  description = "The member's name."
  value       = var.name
}

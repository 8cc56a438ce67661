output "redlab_nodes" {
  description = "Node list for redlab and the lock clients (\"ip:port,...\")."
  value       = module.redlock.redlab_nodes
}

output "private_addresses" {
  description = "Private address of every node."
  value       = module.redlock.private_addresses
}

output "public_addresses" {
  description = "Public address of every node (empty: the nodes have none)."
  value       = module.redlock.public_addresses
}

output "ssh_user" {
  description = "SSH login user of the nodes (redlab hosts from-tofu reads it)."
  value       = module.redlock.ssh_user
}

output "instance_ids" {
  description = "EC2 instance id of every node."
  value       = module.redlock.instance_ids
}

output "availability_zones" {
  description = "Availability zone of every node."
  value       = module.redlock.availability_zones
}

output "restart_delay_seconds" {
  description = "How long a node stays down after a crash or a boot."
  value       = module.redlock.restart_delay_seconds
}

output "pending_nodes" {
  description = "Nodes that still run an older configuration: raise their node_generations entry, one per apply."
  value       = module.redlock.pending_nodes
}

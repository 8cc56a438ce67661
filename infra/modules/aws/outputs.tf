output "private_addresses" {
  description = "Private IPv4 address of every node, in node order."
  value       = aws_instance.this[*].private_ip
}

output "public_addresses" {
  description = "Public IPv4 address of every node, in node order; empty strings, as the module gives its nodes none."
  value       = aws_instance.this[*].public_ip
}

output "ssh_user" {
  description = "The user SSH logs in as on every node (var.ssh_user)."
  value       = var.ssh_user
}

output "redlab_nodes" {
  description = "The node list for redlab and the lock clients: \"ip:port,ip:port,...\", or with tls \"rediss://ip:port,...\" (give the CA as --tls-ca or REDLAB_TLS_CA)."
  value       = join(",", [for ip in aws_instance.this[*].private_ip : "${var.tls == null ? "" : "rediss://"}${ip}:${var.redis_port}"])
}

output "instance_ids" {
  description = "EC2 instance id of every node, in node order."
  value       = aws_instance.this[*].id
}

output "availability_zones" {
  description = "Availability zone of every node, in node order."
  value       = aws_instance.this[*].availability_zone
}

output "security_group_id" {
  description = "Security group admitting the Redis port from client_cidrs."
  value       = aws_security_group.this.id
}

output "restart_delay_seconds" {
  description = "How long a node stays down after a crash or a boot: max_lock_ttl * 1.01 + restart_margin."
  value       = module.redis_node[0].restart_delay_seconds
}

output "data_volume_ids" {
  description = "EBS volume id of every node's data volume (its append-only file), in node order."
  value       = aws_ebs_volume.data[*].id
}

output "pending_nodes" {
  description = "Nodes whose user data, image or instance type differ from the current configuration: they wait for their node_generations entry to be raised."
  value       = module.generations.pending
}

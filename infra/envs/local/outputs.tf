output "nodes" {
  description = "Every node, in order: id, addr (the proxy, what clients use), redis_addr (redis-server itself: on the machine's address with machines), control (the supervisor's control endpoint), and with replicas replica_addr (the replica's redis-server) and replica_link (its replication link's front); both empty without replicas."
  value = [
    for i in range(1, var.node_count + 1) : {
      id           = i
      addr         = "127.0.0.1:${local.nodes[tostring(i)].port}"
      redis_addr   = "${var.machines ? local.nodes[tostring(i)].machine_address : "127.0.0.1"}:${local.nodes[tostring(i)].redis_port}"
      control      = "127.0.0.1:${local.nodes[tostring(i)].control_port}"
      replica_addr = var.replicas > 0 ? "127.0.0.1:${local.nodes[tostring(i)].replica_port}" : ""
      replica_link = var.replicas > 0 ? "127.0.0.1:${local.nodes[tostring(i)].replica_link_port}" : ""
    }
  ]
  # Known only once the nodes exist.
  depends_on = [terraform_data.node]
}

output "addrs" {
  description = "The nodes' proxied addresses, in order: the value of REDLAB_NODES / --nodes."
  value       = [for i in range(1, var.node_count + 1) : "127.0.0.1:${local.nodes[tostring(i)].port}"]
  depends_on  = [terraform_data.node]
}

output "control_endpoints" {
  description = "The supervisors' control endpoints (HTTP on loopback), in node order."
  value       = [for i in range(1, var.node_count + 1) : "127.0.0.1:${local.nodes[tostring(i)].control_port}"]
  depends_on  = [terraform_data.node]
}

output "restart_delay_seconds" {
  description = "The restart guard's delay after a crash, as the module rendered it."
  value       = var.restart_delay_seconds + var.restart_margin
}

output "etcd_members" {
  description = "Every etcd member, in order: id, name, client and peer (the fronts: what clients and the other members use), etcd_client and etcd_peer (etcd itself), control (the supervisor's control endpoint). Empty with etcd_count 0."
  value = [
    for i in range(1, var.etcd_count + 1) : {
      id          = i
      name        = local.etcd_members[tostring(i)].name
      client      = "127.0.0.1:${local.etcd_members[tostring(i)].client_port}"
      peer        = "127.0.0.1:${local.etcd_members[tostring(i)].peer_port}"
      etcd_client = "127.0.0.1:${local.etcd_members[tostring(i)].etcd_client_port}"
      etcd_peer   = "127.0.0.1:${local.etcd_members[tostring(i)].etcd_peer_port}"
      control     = "127.0.0.1:${local.etcd_members[tostring(i)].control_port}"
    }
  ]
  depends_on = [terraform_data.etcd_member]
}

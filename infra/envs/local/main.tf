# The local lab: node_count redis-server nodes on this machine, each run by a
# `redlab node run` supervisor (restart guard, redis-server, fault front,
# control endpoint) with exactly the files infra/modules/redis-node renders
# for a real VM. Nothing is downloaded: terraform_data and local-exec are
# built in.
#
# Differences from a real node, all deliberate:
#   - the ACL is the real one (default user off, redlock, monitor) plus one
#     lab-only user, admin (every command, every key), which the supervisor
#     uses for its readiness PING and the clock-jump model;
#   - bind 127.0.0.1 on a private port; clients use the proxy's port;
#   - the guard's runtime directory is not on tmpfs, so a machine reboot is
#     not seen as a boot (the guard's last-stop state still makes a node whose
#     supervisor vanished wait);
#   - restart_margin = 0 and clock_drift_ratio = 0: the restart delay is
#     exactly restart_delay_seconds, which may be 0 (restart at once: the
#     unsafe practice drills compare);
#   - each node may have its own persistence profile;
#   - replicas = 1 gives every node an asynchronous replica, the "replicas as
#     nodes" mistake the lab demonstrates (see the replica locals below).
#
# machines = true boots each node as a Debian 12 systemd-nspawn machine
# (infra/machine) from the module's cloud_init instead: the production unit,
# chrony and the restart guard under real systemd, with the VM's paths. Its
# differences from a VM are module inputs: bind_address (the machine's own
# loopback address, or with machine_ssh its end of a veth pair), port, lab_admin_password, max_lock_ttl/restart_margin/
# clock_drift_ratio (the lab's exact delay) and ntp_servers (the node's
# supervisor serves the host's time on a loopback address of its own).

locals {
  nodes = {
    for i in range(1, var.node_count + 1) : tostring(i) => {
      id           = i
      port         = var.base_port + i
      redis_port   = var.base_port + 100 + i
      control_port = var.base_port + 200 + i
      # With replicas: the replica's redis-server and the front its
      # replication link goes through.
      replica_port      = var.base_port + 300 + i
      replica_link_port = var.base_port + 400 + i
      dir               = "${var.state_dir}/node${i}"
      # One profile per node, or one for every node. A list of another
      # length fails terraform_data.node's precondition.
      persistence = try(var.persistence[i - 1], var.persistence[0])
      # Machines only: the machine's loopback address and its supervisor's
      # NTP server, both derived from the node's proxy port, which no other
      # lab on this host can hold, so that two labs never share an address.
      # 127.80/16 and 127.81/16 stay clear of infra/verify's 127.0.79.x.
      # With machine_ssh the machine runs in a network namespace of its own
      # (redlab-PORT, also the host's end of its veth pair) on 10.x.y.0/30,
      # x.y again the proxy port's bytes: 10.x.y.2 is the machine's end,
      # 10.x.y.1 the host's, where the supervisor serves NTP. No route leads
      # beyond the pair (infra/lab/layout.go owns the layout).
      machine_address = var.machine_ssh ? "10.${floor((var.base_port + i) / 256)}.${(var.base_port + i) % 256}.2" : "127.80.${floor((var.base_port + i) / 256)}.${(var.base_port + i) % 256}"
      ntp_address     = var.machine_ssh ? "10.${floor((var.base_port + i) / 256)}.${(var.base_port + i) % 256}.1" : "127.81.${floor((var.base_port + i) / 256)}.${(var.base_port + i) % 256}"
      netns           = "redlab-${var.base_port + i}"
      ssh_dir         = "${var.state_dir}/ssh/node${i}"
    }
  }
}

locals {
  redis_conf = { for k, m in module.node : k => m.redis_conf }

  # Lab only: the replica's redis.conf is the master's (same persistence, same
  # ACL users) with its own port and directory; later lines win in redis.conf.
  # It holds no replicaof and no masterauth: the node supervisor makes it a
  # replica at runtime (CONFIG SET masteruser/masterauth as the lab's admin,
  # then REPLICAOF through the link front), so no password is written here.
  replica_conf = {
    for k, n in local.nodes : k => join("\n", [
      local.redis_conf[k],
      "# Lab only: this node's asynchronous replica (the \"replicas as nodes\"",
      "# mistake). It follows the master through 127.0.0.1:${n.replica_link_port}.",
      "port ${n.replica_port}",
      "dir ${n.dir}/replica/data",
      "logfile \"${n.dir}/replica/redis.log\"",
      "",
    ])
  }
}

module "node" {
  source   = "../../modules/redis-node"
  for_each = local.nodes

  port               = each.value.redis_port
  bind_address       = var.machines ? each.value.machine_address : "127.0.0.1"
  max_lock_ttl       = var.restart_delay_seconds
  restart_margin     = var.restart_margin
  clock_drift_ratio  = 0
  maxmemory          = var.maxmemory
  fsync              = lookup({ everysec = "everysec", "no-fsync" = "no" }, each.value.persistence, "always")
  persistence        = each.value.persistence != "none"
  acl_enabled        = true
  redlock_password   = var.redlock_password
  monitor_password   = var.monitor_password
  lab_admin_password = var.admin_password
  # A machine keeps the VM's paths (the module's defaults); its data
  # directory is a data volume its supervisor binds in (package node,
  # machinedisk.go). A process node keeps its files under its node directory.
  data_dir          = var.machines ? "/var/lib/redis" : "${each.value.dir}/data"
  log_file          = var.machines ? "" : "${each.value.dir}/redis.log"
  guard_state_dir   = var.machines ? "/var/lib/redis-guard" : "${each.value.dir}/guard"
  guard_runtime_dir = var.machines ? "/run/redis-guard" : "${each.value.dir}/run"
  redis_server_path = var.machines ? "/usr/bin/redis-server" : var.redis_server_path
  # Polled every second: a machine that boots after a power cut waits in
  # chronyc waitsync for its first update. Process nodes run no chrony.
  ntp_servers       = var.machines ? [each.value.ntp_address] : ["127.0.0.1"]
  ntp_poll_exponent = var.machines ? 0 : null
  # A machine of its own namespace sees every client (the supervisor's front,
  # the drill's clients) come from the host's end of its veth pair.
  client_cidrs = var.machine_ssh ? ["${each.value.ntp_address}/32"] : []
  # One certificate for every process node: all listen on loopback.
  tls = var.tls_dir == null ? null : {
    cert_file = "${var.tls_dir}/node.crt"
    key_file  = "${var.tls_dir}/node.key"
    ca_file   = "${var.tls_dir}/ca.crt"
  }
}

resource "terraform_data" "node" {
  for_each = local.nodes

  # A node whose files or ports change is stopped and started again on the
  # new ones (its data goes with it: a new node).
  triggers_replace = {
    conf         = sha256(nonsensitive(local.redis_conf[each.key]))
    guard        = sha256(module.node[each.key].restart_guard)
    ports        = "${each.value.port}/${each.value.redis_port}/${each.value.control_port}"
    redis_server = var.redis_server_path
    machine      = var.machines ? "${sha256(nonsensitive(module.node[each.key].cloud_init))}${var.machine_ssh ? "/ssh" : ""}" : "none"
    replica      = var.replicas > 0 ? "${each.value.replica_port}/${each.value.replica_link_port}/${sha256(nonsensitive(local.replica_conf[each.key]))}" : "none"
    plain_disk   = var.plain_disks
  }

  # What the destroy provisioner may use (it can read only self).
  input = {
    id         = each.value.id
    state_dir  = var.state_dir
    redlab_bin = var.redlab_bin
  }

  # local-exec appends `command` as the last argument of `interpreter`; no
  # shell is involved, so nothing needs quoting. The files go base64 on the
  # command line; `command` is a short flag because terraform quotes it in
  # error messages. redis.conf is sensitive in the module for its ACL
  # password hashes: SHA-256 of 48 random hex characters, which reveal
  # nothing, so it is made visible here to keep `node start` errors in
  # terraform's output (a sensitive argument would suppress them).
  provisioner "local-exec" {
    interpreter = concat([
      var.redlab_bin, "node", "start",
      "--id", tostring(each.value.id),
      "--state-dir", var.state_dir,
      "--port", tostring(each.value.port),
      "--redis-port", tostring(each.value.redis_port),
      "--control-port", tostring(each.value.control_port),
      "--redis-server", var.redis_server_path,
      "--guard-b64", base64encode(module.node[each.key].restart_guard),
      "--conf-b64", base64encode(nonsensitive(local.redis_conf[each.key])),
      ], var.replicas > 0 ? [
      "--replica-port", tostring(each.value.replica_port),
      "--replica-link-port", tostring(each.value.replica_link_port),
      "--replica-conf-b64", base64encode(nonsensitive(local.replica_conf[each.key])),
      ] : [], var.machines ? [
      "--machine-address", each.value.machine_address,
      "--ntp-address", each.value.ntp_address,
      "--cloud-init-b64", base64encode(nonsensitive(module.node[each.key].cloud_init)),
      ] : [], var.machines && var.machine_ssh ? [
      "--machine-netns", each.value.netns,
      "--machine-ssh-dir", each.value.ssh_dir,
    ] : [], var.plain_disks ? ["--plain-disk"] : [])
    command = "--restart-delay=${module.node[each.key].restart_delay_seconds}s"
  }

  lifecycle {
    precondition {
      condition     = length(var.persistence) == 1 || length(var.persistence) == var.node_count
      error_message = "persistence must list one profile for every node, or exactly node_count profiles (one per node)."
    }
    precondition {
      condition     = var.tls_dir == null || (var.replicas == 0 && !var.machines)
      error_message = "tls_dir goes with independent process nodes only: replicas would need TLS replication, and machines the files inside them."
    }
    precondition {
      condition     = var.machines || !var.machine_ssh
      error_message = "machine_ssh gives machines a network namespace and sshd of their own: it needs machines = true."
    }
    precondition {
      condition     = !(var.machines && var.replicas > 0)
      error_message = "machines and replicas do not go together: a machine runs one redis-server under systemd."
    }
    precondition {
      condition     = var.replicas == 0 || var.base_port + 499 <= 65535
      error_message = "with replicas, base_port must leave room for five port ranges (base_port + 499 <= 65535)."
    }
  }

  provisioner "local-exec" {
    when        = destroy
    interpreter = [self.input.redlab_bin, "node", "stop", "--id", tostring(self.input.id), "--state-dir", self.input.state_dir]
    command     = "--purge"
  }
}

# etcd members (etcd_count > 0): each one an etcd process run by its own
# `redlab node etcd-run` supervisor, like a Redis node, behind two fault
# fronts: clients and the other members reach it only through them (the
# member advertises the fronts), so the lab's network faults act on both
# client and raft traffic that reaches the member. The configuration is what
# infra/modules/etcd-member renders for any host.
locals {
  etcd_members = {
    for i in range(1, var.etcd_count + 1) : tostring(i) => {
      id               = i
      name             = "etcd${i}"
      client_port      = var.base_port + 600 + i
      peer_port        = var.base_port + 700 + i
      etcd_client_port = var.base_port + 800 + i
      etcd_peer_port   = var.base_port + 900 + i
      control_port     = var.base_port + 1000 + i
      dir              = "${var.state_dir}/etcd${i}"
    }
  }
  etcd_initial_cluster = { for k, m in local.etcd_members : m.name => "http://127.0.0.1:${m.peer_port}" }
}

module "etcd_member" {
  source   = "../../modules/etcd-member"
  for_each = local.etcd_members

  name     = each.value.name
  data_dir = "${each.value.dir}/data"
  log_file = "${each.value.dir}/etcd.log"
  urls = {
    listen_client    = "http://127.0.0.1:${each.value.etcd_client_port}"
    advertise_client = "http://127.0.0.1:${each.value.client_port}"
    listen_peer      = "http://127.0.0.1:${each.value.etcd_peer_port}"
    advertise_peer   = "http://127.0.0.1:${each.value.peer_port}"
  }
  initial_cluster = local.etcd_initial_cluster
  unsafe_no_fsync = var.etcd_unsafe_no_fsync
  # One per lab: the state directory is the lab's identity on this host.
  cluster_token = "redlab-${substr(sha256(var.state_dir), 0, 16)}"
}

resource "terraform_data" "etcd_member" {
  for_each = local.etcd_members

  # A member whose configuration or ports change is a new member of a new
  # cluster: stopped, its data removed, started again.
  triggers_replace = {
    conf        = sha256(module.etcd_member[each.key].etcd_conf)
    ports       = "${each.value.client_port}/${each.value.peer_port}/${each.value.etcd_client_port}/${each.value.etcd_peer_port}/${each.value.control_port}"
    etcd_server = var.etcd_server_path
    plain_disk  = var.plain_disks
  }

  input = {
    id         = each.value.id
    state_dir  = var.state_dir
    redlab_bin = var.redlab_bin
  }

  # As for the Redis nodes: no shell, the file goes base64. `etcd-start`
  # returns once etcd listens, not once it is healthy: a member cannot be
  # healthy before a majority of its cluster runs (infra/lab waits for that).
  provisioner "local-exec" {
    interpreter = concat([
      var.redlab_bin, "node", "etcd-start",
      "--id", tostring(each.value.id),
      "--state-dir", var.state_dir,
      "--client-port", tostring(each.value.client_port),
      "--peer-port", tostring(each.value.peer_port),
      "--etcd-client-port", tostring(each.value.etcd_client_port),
      "--etcd-peer-port", tostring(each.value.etcd_peer_port),
      "--control-port", tostring(each.value.control_port),
      "--etcd-server", var.etcd_server_path,
      "--conf-b64", base64encode(module.etcd_member[each.key].etcd_conf),
    ], var.plain_disks ? ["--plain-disk"] : [], var.etcd_unsafe_no_fsync ? ["--unsafe-no-fsync"] : [])
    command = "--restart-delay=${var.restart_delay_seconds}s"
  }

  lifecycle {
    precondition {
      condition     = var.etcd_count == 0 || var.base_port + 1000 + var.etcd_count <= 65535
      error_message = "with etcd members, base_port must leave room for their ranges (base_port + 1000 + etcd_count <= 65535)."
    }
    precondition {
      condition     = !var.machines
      error_message = "etcd members run as processes next to process nodes only (not with machines = true)."
    }
  }

  provisioner "local-exec" {
    when        = destroy
    interpreter = [self.input.redlab_bin, "node", "etcd-stop", "--id", tostring(self.input.id), "--state-dir", self.input.state_dir]
    command     = "--purge"
  }
}

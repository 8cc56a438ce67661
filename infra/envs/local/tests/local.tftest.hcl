# Plan-only checks of the lab root module: ports, paths and the rendered
# node files. Nothing is provisioned (plan runs no provisioner).

variables {
  state_dir        = "/tmp/redlab-tftest"
  redlab_bin       = "/usr/local/bin/redlab"
  redlock_password = "test-redlock-password"
  monitor_password = "test-monitor-password"
  admin_password   = "test-admin-password"
}

run "layout" {
  command = plan

  variables {
    node_count            = 3
    base_port             = 7100
    restart_delay_seconds = 2.5
  }

  assert {
    condition     = output.addrs == ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"]
    error_message = "node N's proxy must listen on base_port+N"
  }
  assert {
    condition     = output.control_endpoints == ["127.0.0.1:7301", "127.0.0.1:7302", "127.0.0.1:7303"]
    error_message = "node N's control endpoint must be on base_port+200+N"
  }
  assert {
    condition     = output.nodes[1].redis_addr == "127.0.0.1:7202" && output.nodes[1].id == 2
    error_message = "node N's redis-server must be on base_port+100+N"
  }
  assert {
    condition = alltrue([
      strcontains(module.node["2"].redis_conf, "port 7202\n"),
      strcontains(module.node["2"].redis_conf, "bind 127.0.0.1\n"),
      strcontains(module.node["2"].redis_conf, "dir /tmp/redlab-tftest/node2/data\n"),
      strcontains(module.node["2"].redis_conf, "logfile \"/tmp/redlab-tftest/node2/redis.log\"\n"),
      strcontains(module.node["2"].redis_conf, "appendonly yes\n"),
      strcontains(module.node["2"].redis_conf, "appendfsync always\n"),
    ])
    error_message = "node 2's redis.conf must use its private port, its directory under state_dir and fsync always"
  }
  assert {
    condition = alltrue([
      strcontains(local.redis_conf["1"], "user default off resetpass resetkeys resetchannels -@all\n"),
      strcontains(local.redis_conf["1"], "user redlock on #${sha256("test-redlock-password")} resetkeys ~lock:* "),
      strcontains(local.redis_conf["1"], "user monitor on #${sha256("test-monitor-password")} "),
      strcontains(local.redis_conf["1"], "user admin on #${sha256("test-admin-password")} resetkeys ~* resetchannels &* +@all\n"),
      startswith(local.redis_conf["1"], module.node["1"].redis_conf),
    ])
    error_message = "the lab renders the real ACL (default off, redlock, monitor) and appends its admin user"
  }
  assert {
    condition     = length(regexall("test-[a-z]+-password", local.redis_conf["2"])) == 0
    error_message = "no password reaches redis.conf in clear"
  }
  assert {
    condition = alltrue([
      strcontains(module.node["3"].restart_guard, "REDIS_GUARD_DELAY:-2.5}"),
      strcontains(module.node["3"].restart_guard, "state_dir='/tmp/redlab-tftest/node3/guard'"),
      strcontains(module.node["3"].restart_guard, "runtime_dir='/tmp/redlab-tftest/node3/run'"),
    ])
    error_message = "the restart guard must wait restart_delay_seconds (margin 0) and keep its state under the node directory"
  }
  assert {
    condition     = output.restart_delay_seconds == 2.5
    error_message = "the restart delay is restart_delay_seconds plus a zero margin"
  }
}

run "everysec" {
  command = plan
  variables {
    node_count  = 1
    persistence = ["everysec"]
  }
  assert {
    condition     = strcontains(module.node["1"].redis_conf, "appendonly yes\n") && strcontains(module.node["1"].redis_conf, "appendfsync everysec\n")
    error_message = "everysec renders AOF with appendfsync everysec"
  }
}

run "no_fsync" {
  command = plan
  variables {
    node_count  = 1
    persistence = ["no-fsync"]
  }
  assert {
    condition     = strcontains(module.node["1"].redis_conf, "appendonly yes\n") && strcontains(module.node["1"].redis_conf, "appendfsync no\n")
    error_message = "no-fsync renders AOF with appendfsync no"
  }
}

run "none" {
  command = plan
  variables {
    node_count  = 1
    persistence = ["none"]
  }
  assert {
    condition     = strcontains(module.node["1"].redis_conf, "appendonly no\n") && strcontains(module.node["1"].redis_conf, "save \"\"\n")
    error_message = "none renders no AOF and no RDB"
  }
  assert {
    condition     = strcontains(module.node["1"].restart_guard, "persistence='false'")
    error_message = "without persistence the guard must wait after every stop"
  }
}

run "per_node_persistence" {
  command = plan
  variables {
    node_count  = 3
    persistence = ["always", "everysec", "none"]
  }
  assert {
    condition = alltrue([
      strcontains(module.node["1"].redis_conf, "appendonly yes\n") && strcontains(module.node["1"].redis_conf, "appendfsync always\n"),
      strcontains(module.node["2"].redis_conf, "appendonly yes\n") && strcontains(module.node["2"].redis_conf, "appendfsync everysec\n"),
      strcontains(module.node["3"].redis_conf, "appendonly no\n") && strcontains(module.node["3"].redis_conf, "save \"\"\n"),
    ])
    error_message = "each node renders its own profile, in node order"
  }
}

run "one_profile_for_every_node" {
  command = plan
  variables {
    node_count  = 3
    persistence = ["everysec"]
  }
  assert {
    condition     = alltrue([for k in ["1", "2", "3"] : strcontains(module.node[k].redis_conf, "appendfsync everysec\n")])
    error_message = "a one-item list applies to every node"
  }
}

run "persistence_list_length" {
  command = plan
  variables {
    node_count  = 3
    persistence = ["always", "everysec"]
  }
  expect_failures = [terraform_data.node]
}

run "bad_persistence" {
  command = plan
  variables {
    persistence = ["sometimes"]
  }
  expect_failures = [var.persistence]
}

run "empty_persistence" {
  command = plan
  variables {
    persistence = []
  }
  expect_failures = [var.persistence]
}

run "no_restart_delay" {
  command = plan
  variables {
    node_count            = 1
    restart_delay_seconds = 0
  }
  assert {
    condition     = strcontains(module.node["1"].restart_guard, "REDIS_GUARD_DELAY:-0}") && output.restart_delay_seconds == 0
    error_message = "restart_delay_seconds = 0 renders a guard that does not wait"
  }
}

run "negative_restart_delay" {
  command = plan
  variables {
    restart_delay_seconds = -1
  }
  expect_failures = [var.restart_delay_seconds]
}

run "bad_node_count" {
  command = plan
  variables {
    node_count = 0
  }
  expect_failures = [var.node_count]
}

run "bad_base_port" {
  command = plan
  variables {
    base_port = 65300
  }
  expect_failures = [var.base_port]
}

run "short_password" {
  command = plan
  variables {
    admin_password = "short"
  }
  expect_failures = [var.admin_password]
}

run "relative_state_dir" {
  command = plan
  variables {
    state_dir = "relative/dir"
  }
  expect_failures = [var.state_dir]
}

run "replicas" {
  command = plan
  variables {
    node_count = 2
    base_port  = 7100
    replicas   = 1
  }
  assert {
    condition     = output.nodes[1].replica_addr == "127.0.0.1:7402" && output.nodes[1].replica_link == "127.0.0.1:7502"
    error_message = "node N's replica must be on base_port+300+N and its replication link's front on base_port+400+N"
  }
  assert {
    condition = alltrue([
      startswith(local.replica_conf["2"], local.redis_conf["2"]),
      strcontains(local.replica_conf["2"], "\nport 7402\ndir /tmp/redlab-tftest/node2/replica/data\nlogfile \"/tmp/redlab-tftest/node2/replica/redis.log\"\n"),
      length(regexall("(?m)^(replicaof|masterauth|masteruser) ", local.replica_conf["2"])) == 0,
    ])
    error_message = "the replica's redis.conf is the master's (ACL included) with its own port and directory, and no replicaof or password"
  }
  assert {
    condition     = length(regexall("test-[a-z]+-password", local.replica_conf["1"])) == 0
    error_message = "no password reaches the replica's redis.conf in clear"
  }
}

run "no_replicas" {
  command = plan
  variables {
    node_count = 1
  }
  assert {
    condition     = output.nodes[0].replica_addr == "" && output.nodes[0].replica_link == ""
    error_message = "without replicas a node has no replica address"
  }
}

run "bad_replicas" {
  command = plan
  variables {
    replicas = 2
  }
  expect_failures = [var.replicas]
}

run "replicas_base_port_room" {
  command = plan
  variables {
    replicas  = 1
    base_port = 65100
  }
  expect_failures = [terraform_data.node]
}

run "machines" {
  command = plan

  variables {
    node_count            = 3
    base_port             = 9100
    restart_delay_seconds = 3
    machines              = true
  }

  assert {
    condition     = output.addrs == ["127.0.0.1:9101", "127.0.0.1:9102", "127.0.0.1:9103"]
    error_message = "with machines, clients still use the proxies on base_port+N"
  }
  assert {
    # 9102 = 35 * 256 + 142
    condition     = output.nodes[1].redis_addr == "127.80.35.142:9202"
    error_message = "node N's machine must bind 127.80.x.y derived from its proxy port, on base_port+100+N"
  }
  assert {
    condition = alltrue([
      strcontains(module.node["2"].redis_conf, "bind 127.80.35.142\n"),
      strcontains(module.node["2"].redis_conf, "port 9202\n"),
      strcontains(module.node["2"].redis_conf, "dir /var/lib/redis\n"),
      strcontains(module.node["2"].redis_conf, "user admin on #${sha256("test-admin-password")} resetkeys ~* resetchannels &* +@all\n"),
      strcontains(module.node["2"].chrony_conf, "server 127.81.35.142 prefer iburst minpoll 0 maxpoll 0\n"),
      module.node["2"].restart_delay_seconds == 3,
      strcontains(module.node["2"].cloud_init, "- path: /etc/redis/redlock.conf"),
    ])
    error_message = "a machine's user data must be the module's, with the lab's address, port, admin user, NTP source and exact delay as inputs"
  }
}

run "machines_ssh" {
  command = plan

  variables {
    node_count            = 3
    base_port             = 9100
    restart_delay_seconds = 3
    machines              = true
    machine_ssh           = true
  }

  assert {
    condition     = output.addrs == ["127.0.0.1:9101", "127.0.0.1:9102", "127.0.0.1:9103"]
    error_message = "with machine_ssh, clients still use the proxies on base_port+N"
  }
  assert {
    # 9102 = 35 * 256 + 142: the machine's end of its veth pair, 10.35.142.2.
    condition     = output.nodes[1].redis_addr == "10.35.142.2:9202"
    error_message = "node N's machine must bind 10.x.y.2 of its veth pair, x.y derived from its proxy port"
  }
  assert {
    condition = alltrue([
      strcontains(module.node["2"].redis_conf, "bind 10.35.142.2\n"),
      strcontains(module.node["2"].chrony_conf, "server 10.35.142.1 prefer iburst minpoll 0 maxpoll 0\n"),
      strcontains(module.node["2"].redis_unit, "IPAddressAllow=localhost 10.35.142.1/32\n"),
    ])
    error_message = "a namespaced machine binds its veth address, takes NTP from the host's end and admits clients from it"
  }
}

run "ssh_without_machines" {
  command = plan

  variables {
    machine_ssh = true
  }

  expect_failures = [terraform_data.node]
}

run "machines_without_replicas" {
  command = plan

  variables {
    machines = true
    replicas = 1
  }

  expect_failures = [terraform_data.node]
}

run "etcd_members" {
  command = plan
  variables {
    etcd_count       = 3
    etcd_server_path = "/opt/redlab/bin/etcd"
  }
  assert {
    condition     = length(module.etcd_member) == 3
    error_message = "etcd_count 3 must render three members."
  }
  assert {
    condition = (
      yamldecode(module.etcd_member["2"].etcd_conf)["listen-client-urls"] == "http://127.0.0.1:7902" &&
      yamldecode(module.etcd_member["2"].etcd_conf)["advertise-client-urls"] == "http://127.0.0.1:7702" &&
      yamldecode(module.etcd_member["2"].etcd_conf)["listen-peer-urls"] == "http://127.0.0.1:8002" &&
      yamldecode(module.etcd_member["2"].etcd_conf)["initial-advertise-peer-urls"] == "http://127.0.0.1:7802"
    )
    error_message = "member 2 must listen on base+800+2 and base+900+2 and advertise its fronts, base+600+2 and base+700+2."
  }
  assert {
    condition     = yamldecode(module.etcd_member["3"].etcd_conf)["initial-cluster"] == "etcd1=http://127.0.0.1:7801,etcd2=http://127.0.0.1:7802,etcd3=http://127.0.0.1:7803"
    error_message = "the initial cluster must name every member's peer front."
  }
  assert {
    condition     = yamldecode(module.etcd_member["1"].etcd_conf)["data-dir"] == "/tmp/redlab-tftest/etcd1/data"
    error_message = "member 1's data must live in its directory of the state dir."
  }
}

run "etcd_unsafe_no_fsync" {
  command = plan
  variables {
    etcd_count           = 3
    etcd_server_path     = "/opt/redlab/bin/etcd"
    etcd_unsafe_no_fsync = true
  }
  assert {
    condition     = alltrue([for m in module.etcd_member : yamldecode(m.etcd_conf)["unsafe-no-fsync"] == true])
    error_message = "etcd_unsafe_no_fsync must render unsafe-no-fsync: true for every member."
  }
}

run "no_etcd_by_default" {
  command = plan
  assert {
    condition     = length(module.etcd_member) == 0
    error_message = "without etcd_count there must be no etcd member."
  }
}

run "even_etcd_count" {
  command = plan
  variables {
    etcd_count = 2
  }
  expect_failures = [var.etcd_count]
}

# redlab lab up --tls: every node TLS-only on its private port, with the
# lab's files; the front (the proxy port) relays the TLS bytes.
run "tls" {
  command = plan

  variables {
    node_count = 3
    base_port  = 7100
    tls_dir    = "/tmp/redlab-tftest/tls"
  }

  assert {
    condition = alltrue([for k in ["1", "2", "3"] : alltrue([
      strcontains(local.redis_conf[k], "port 0\n"),
      strcontains(local.redis_conf[k], "tls-port ${7200 + tonumber(k)}\n"),
      strcontains(local.redis_conf[k], "tls-cert-file /tmp/redlab-tftest/tls/node.crt\n"),
      strcontains(local.redis_conf[k], "tls-key-file /tmp/redlab-tftest/tls/node.key\n"),
      strcontains(local.redis_conf[k], "tls-ca-cert-file /tmp/redlab-tftest/tls/ca.crt\n"),
    ])])
    error_message = "with tls_dir, every node must serve TLS only, on its private port, with the lab's files"
  }
}

run "tls_with_replicas" {
  command = plan

  variables {
    node_count = 3
    replicas   = 1
    tls_dir    = "/tmp/redlab-tftest/tls"
  }
  expect_failures = [terraform_data.node]
}

variable "node_count" {
  description = "Independent Redis nodes in the lab. Redlock wants an odd number; any count from 1 to 99 is allowed for experiments."
  type        = number
  default     = 5
  validation {
    condition     = var.node_count >= 1 && var.node_count <= 99 && floor(var.node_count) == var.node_count
    error_message = "node_count must be an integer from 1 to 99."
  }
}

variable "base_port" {
  description = "Node N's proxy (the address clients use) listens on base_port+N, its redis-server on base_port+100+N and its control endpoint on base_port+200+N, all on 127.0.0.1; with replicas, also base_port+300+N (the replica) and base_port+400+N (its replication link's front)."
  type        = number
  default     = 7100
  validation {
    condition     = var.base_port >= 1024 && var.base_port + 299 <= 65535 && floor(var.base_port) == var.base_port
    error_message = "base_port must be an integer >= 1024 and <= 65236 (room for three port ranges)."
  }
}

variable "persistence" {
  description = "Each node's persistence profile, in node order (node_count items), or one item for every node. always: AOF, appendfsync always (the Redlock practice). everysec: AOF, appendfsync everysec. no-fsync: AOF, appendfsync no (the kernel writes it back when it likes: the power-loss negative control). none: no AOF and no RDB, so a restarted node has lost every key (the restart guard then waits after every stop)."
  type        = list(string)
  default     = ["always"]
  validation {
    condition     = length(var.persistence) >= 1 && alltrue([for p in var.persistence : contains(["always", "everysec", "no-fsync", "none"], p)])
    error_message = "persistence must list at least one profile, each one of always, everysec, no-fsync, none."
  }
  # That the list has one item or node_count items is a precondition of
  # terraform_data.node: a validation block may refer to another variable
  # only from Terraform 1.9, and not in every OpenTofu.
}

variable "restart_delay_seconds" {
  description = "How long a node stays down after a crash (and, for persistence none, after any stop). It is the longest lock TTL the lab's clients may use: the module's max_lock_ttl. 0 restarts at once: the unsafe practice the lab's drills compare against."
  type        = number
  default     = 5
  validation {
    condition     = var.restart_delay_seconds >= 0 && var.restart_delay_seconds <= 3600
    error_message = "restart_delay_seconds must be >= 0 and <= 3600."
  }
}

variable "restart_margin" {
  description = "Seconds added to restart_delay_seconds by the restart guard (the module's restart_margin). 0 in the lab, so that the delay is exactly what was asked for."
  type        = number
  default     = 0
  validation {
    condition     = var.restart_margin >= 0 && var.restart_margin <= 3600
    error_message = "restart_margin must be between 0 and 3600."
  }
}

variable "state_dir" {
  description = "Absolute directory holding every node's files (stateDir/nodeN: redis.conf, restart guard, data, logs, pid files)."
  type        = string
  validation {
    condition     = can(regex("^/[A-Za-z0-9._/-]+$", var.state_dir))
    error_message = "state_dir must be an absolute path of letters, digits, '.', '_', '-' and '/'."
  }
}

variable "redlab_bin" {
  description = "Absolute path of the redlab binary the provisioners run (`redlab node start` / `redlab node stop`)."
  type        = string
  validation {
    condition     = startswith(var.redlab_bin, "/")
    error_message = "redlab_bin must be an absolute path."
  }
}

variable "redis_server_path" {
  description = "The redis-server binary the node supervisors run."
  type        = string
  default     = "/usr/bin/redis-server"
  validation {
    condition     = can(regex("^/[A-Za-z0-9._/-]+$", var.redis_server_path))
    error_message = "redis_server_path must be an absolute path without spaces."
  }
}

variable "maxmemory" {
  description = "Redis maxmemory per node."
  type        = string
  default     = "64mb"
}

variable "replicas" {
  description = "0: independent nodes (the Redlock practice). 1: every node gets an asynchronous replica (a second redis-server on base_port+300+N that follows the node through a front on base_port+400+N), which `redlab fault failover` promotes behind the node's address: the \"replicas as nodes\" mistake."
  type        = number
  default     = 0
  validation {
    condition     = contains([0, 1], var.replicas)
    error_message = "replicas must be 0 or 1."
  }
}

variable "redlock_password" {
  description = "Password of the ACL user \"redlock\" (takes locks). infra/lab generates it and passes it in a var file. Only its SHA-256 reaches redis.conf."
  type        = string
  sensitive   = true
  validation {
    condition     = length(var.redlock_password) >= 16
    error_message = "redlock_password must be at least 16 characters."
  }
}

variable "monitor_password" {
  description = "Password of the read-only ACL user \"monitor\" (doctor, exporters). Generated by infra/lab; only its SHA-256 reaches redis.conf."
  type        = string
  sensitive   = true
  validation {
    condition     = length(var.monitor_password) >= 16
    error_message = "monitor_password must be at least 16 characters."
  }
}

variable "admin_password" {
  description = "Password of the lab-only ACL user \"admin\" (every command on every key: the supervisor's user). Generated by infra/lab; only its SHA-256 reaches redis.conf."
  type        = string
  sensitive   = true
  validation {
    condition     = length(var.admin_password) >= 16
    error_message = "admin_password must be at least 16 characters."
  }
}

variable "machines" {
  description = "false: every node is a redis-server process run by its supervisor (the fast default). true: every node is a Debian 12 systemd-nspawn machine (infra/machine, needs root) booted from the module's cloud_init, so that the production unit, chrony and the restart guard run under real systemd; the machine binds 127.80.x.y (derived from the node's proxy port) and its supervisor serves NTP on 127.81.x.y."
  type        = bool
  default     = false
}

variable "etcd_count" {
  description = "etcd members next to the Redis nodes (0: none): the consensus-based alternative to Redlock. Member M's client front is on base_port+600+M, its peer front on base_port+700+M, etcd itself on base_port+800+M (clients) and base_port+900+M (peers), its supervisor's control endpoint on base_port+1000+M."
  type        = number
  default     = 0
  validation {
    condition     = contains([0, 1, 3, 5], var.etcd_count)
    error_message = "etcd_count must be 0, 1, 3 or 5 (an odd cluster, so that a majority exists)."
  }
}

variable "etcd_server_path" {
  description = "The etcd binary the member supervisors run (`make etcd` builds bin/etcd)."
  type        = string
  default     = "/usr/local/bin/etcd"
  validation {
    condition     = can(regex("^/[A-Za-z0-9._/-]+$", var.etcd_server_path))
    error_message = "etcd_server_path must be an absolute path without spaces."
  }
}

variable "port" {
  description = "TCP port Redis listens on (the TLS port when tls is set; plain TCP is then off)."
  type        = number
  default     = 6379
  validation {
    condition     = var.port >= 1 && var.port <= 65535 && floor(var.port) == var.port
    error_message = "port must be an integer between 1 and 65535."
  }
}

variable "bind_address" {
  description = "The node's private address Redis binds to. A wildcard (0.0.0.0, ::, *) is refused: a lock server listens only where its clients are."
  type        = string
  default     = "127.0.0.1"
  validation {
    condition = (
      (can(cidrhost("${var.bind_address}/32", 0)) || can(cidrhost("${var.bind_address}/128", 0)))
      && !contains(["0.0.0.0", "::", "*"], var.bind_address)
    )
    error_message = "bind_address must be one specific IPv4 or IPv6 address, not a wildcard."
  }
}

variable "max_lock_ttl" {
  description = "Longest lock TTL any client uses, in seconds (fractions allowed). After a crash or a boot Redis is held back this long (plus clock_drift_ratio of it) plus restart_margin, so every lock the node may have lost has expired. 0 (with restart_margin 0: no delay at all) exists for the local lab's unsafe-practice drills; modules/aws requires more than 0."
  type        = number
  validation {
    condition     = var.max_lock_ttl >= 0 && var.max_lock_ttl <= 86400
    error_message = "max_lock_ttl must be >= 0 and <= 86400 seconds."
  }
}

variable "restart_margin" {
  description = "Seconds added to the restart delay on top of max_lock_ttl * (1 + clock_drift_ratio): covers the time a client took to acquire and what drift a short TTL leaves out."
  type        = number
  default     = 1
  validation {
    condition     = var.restart_margin >= 0 && var.restart_margin <= 3600
    error_message = "restart_margin must be between 0 and 3600 seconds."
  }
}

variable "clock_drift_ratio" {
  description = "Fraction of max_lock_ttl added to the restart delay, so that it grows with the TTL: the node measures the delay on its own clock, which may run slower than a client's over a long lock (the Redlock client allows the same 1%: validity = ttl - elapsed - ttl*0.01 - 2 ms). The delay is max_lock_ttl * (1 + clock_drift_ratio) + restart_margin. The local lab sets 0 to get exactly the delay it asks for."
  type        = number
  default     = 0.01
  validation {
    condition     = var.clock_drift_ratio >= 0 && var.clock_drift_ratio <= 0.1
    error_message = "clock_drift_ratio must be between 0 and 0.1."
  }
}

variable "maxmemory" {
  description = "Redis maxmemory (e.g. \"256mb\", \"1gb\"). With noeviction a full node refuses new locks instead of evicting held ones."
  type        = string
  default     = "256mb"
  validation {
    condition     = can(regex("^[1-9][0-9]*([kKmMgG][bB]?|[bB])?$", var.maxmemory))
    error_message = "maxmemory must be a positive size such as 268435456, 256mb or 1gb."
  }
}

variable "fsync" {
  description = "appendfsync policy. \"always\" is the Redlock rule (a granted lock is on disk before the client hears OK); \"everysec\" and \"no\" exist for the lab's comparisons."
  type        = string
  default     = "always"
  validation {
    condition     = contains(["always", "everysec", "no"], var.fsync)
    error_message = "fsync must be one of always, everysec, no."
  }
}

variable "persistence" {
  description = "Append-only file on. false renders appendonly no and no RDB snapshots (the lab's \"none\" profile); the restart guard then waits after every stop, because every restart loses every key."
  type        = bool
  default     = true
}

variable "ntp_servers" {
  description = "NTP servers for chrony (host names or addresses). Use sources that all smear leap seconds or none that do, never a mix."
  type        = list(string)
  default     = ["0.debian.pool.ntp.org", "1.debian.pool.ntp.org", "2.debian.pool.ntp.org", "3.debian.pool.ntp.org"]
  validation {
    condition     = length(var.ntp_servers) > 0 && alltrue([for s in var.ntp_servers : can(regex("^[A-Za-z0-9][A-Za-z0-9.:-]*$", s))])
    error_message = "ntp_servers must list at least one host name or address (letters, digits, '.', ':', '-')."
  }
}

variable "ntp_poll_exponent" {
  description = "Polling interval of every NTP server as a power of two seconds (chrony's minpoll and maxpoll). null keeps chrony's default, 64 s growing to 1024 s; 4 (16 s) is what AWS recommends for the Amazon Time Sync Service. The first server in ntp_servers is marked prefer."
  type        = number
  default     = null
  validation {
    condition     = var.ntp_poll_exponent == null ? true : (var.ntp_poll_exponent >= -6 && var.ntp_poll_exponent <= 24 && floor(var.ntp_poll_exponent) == var.ntp_poll_exponent)
    error_message = "ntp_poll_exponent must be null or an integer from -6 to 24 (chrony's range for minpoll and maxpoll)."
  }
}

variable "client_cidrs" {
  description = "CIDR blocks the Redis unit may talk to besides localhost (systemd IPAddressAllow=, with IPAddressDeny=any): the lock clients and monitoring. A firewall inside the node, under the security group and bind."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.client_cidrs : can(cidrhost(c, 0)) && can(regex("^[0-9a-fA-F.:]+/[0-9]+$", c))])
    error_message = "client_cidrs must be CIDR blocks such as 10.0.0.0/16 or 2001:db8::/32."
  }
  validation {
    condition     = length(setintersection(toset(var.client_cidrs), toset(["0.0.0.0/0", "::/0"]))) == 0
    error_message = "client_cidrs must not admit every address (0.0.0.0/0, ::/0)."
  }
}

variable "data_device" {
  description = "Block device holding data_dir (the append-only file), e.g. /dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0; null keeps the data on the root file system. The user data adds it to /etc/fstab: formatted ext4 when blank (x-systemd.makefs), grown to the device (x-systemd.growfs), nofail so that the node still boots without it, and Redis never starts until it is mounted (RequiresMountsFor=)."
  type        = string
  default     = null
  validation {
    condition     = var.data_device == null ? true : can(regex("^/dev/[A-Za-z0-9._/:-]+$", var.data_device))
    error_message = "data_device must be null or a path under /dev without spaces."
  }
}

variable "acl_enabled" {
  description = "Render the ACL: the default user off, a redlock user limited to the lock commands on lock keys, a read-only monitor user. Requires both passwords."
  type        = bool
  default     = true
}

variable "redlock_password" {
  description = "Password of the ACL user \"redlock\" used by the lock clients (at least 16 characters). Only its SHA-256 reaches redis.conf."
  type        = string
  default     = null
  sensitive   = true
  validation {
    condition     = var.redlock_password == null ? true : length(var.redlock_password) >= 16
    error_message = "redlock_password must be at least 16 characters."
  }
}

variable "monitor_password" {
  description = "Password of the read-only ACL user \"monitor\" used by `redlab doctor` and the exporter (at least 16 characters). Only its SHA-256 reaches redis.conf."
  type        = string
  default     = null
  sensitive   = true
  validation {
    condition     = var.monitor_password == null ? true : length(var.monitor_password) >= 16
    error_message = "monitor_password must be at least 16 characters."
  }
}

variable "lab_admin_password" {
  description = "Lab only, never on a real node: when set, the ACL gets a user \"admin\" with every command on every key and this password (at least 16 characters; only its SHA-256 reaches redis.conf). The local lab's supervisor logs in as admin for its readiness PING and its fault models. null (the default) renders no such user."
  type        = string
  default     = null
  sensitive   = true
  validation {
    condition     = var.lab_admin_password == null ? true : length(var.lab_admin_password) >= 16
    error_message = "lab_admin_password must be null or at least 16 characters."
  }
}

variable "lock_key_prefix" {
  description = "Prefix of the keys the redlock user may touch (the ACL pattern is this prefix followed by *)."
  type        = string
  default     = "lock:"
  validation {
    condition     = can(regex("^[A-Za-z0-9:_.-]+$", var.lock_key_prefix))
    error_message = "lock_key_prefix must be non-empty and use only letters, digits, ':', '_', '.', '-'."
  }
}

variable "redis_version" {
  description = "Major.minor of the redis-server the node runs (Debian 12 ships 7.0). ACL rules naming commands newer than this version are left out, because Redis refuses to start on an unknown command in an ACL."
  type        = string
  default     = "7.0"
  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+$", var.redis_version)) && try(tonumber(split(".", var.redis_version)[0]) >= 7, false)
    error_message = "redis_version must look like 7.0 or 7.2 (7.0 or newer: the ACL uses subcommand rules)."
  }
}

variable "tls" {
  description = "Serve TLS instead of plain TCP on port. Paths of the PEM certificate, key and CA on the node."
  type = object({
    cert_file = string
    key_file  = string
    ca_file   = string
  })
  default = null
  validation {
    condition = var.tls == null ? true : alltrue([
      for p in [var.tls.cert_file, var.tls.key_file, var.tls.ca_file] : can(regex("^/[A-Za-z0-9._/-]+$", p))
    ])
    error_message = "tls cert_file, key_file and ca_file must be absolute paths without spaces."
  }
}

variable "tls_fetch_script" {
  description = "With tls: a shell script run as root (by redlock-tls-fetch.service, which the Redis unit starts) before every start of Redis that puts tls.cert_file, tls.key_file and tls.ca_file in place, readable by the redis group, from where the platform keeps them (modules/aws: SSM Parameter Store). Installed as tls_fetch_path. Null: the files are put there by other means (the local lab writes them itself)."
  type        = string
  default     = null
  validation {
    condition     = var.tls_fetch_script == null ? true : startswith(var.tls_fetch_script, "#!")
    error_message = "tls_fetch_script must be a script starting with #!."
  }
}

variable "tls_fetch_path" {
  description = "Where tls_fetch_script is installed."
  type        = string
  default     = "/usr/local/sbin/redlock-tls-fetch"
  validation {
    condition     = can(regex("^/[A-Za-z0-9._/-]+$", var.tls_fetch_path))
    error_message = "tls_fetch_path must be an absolute path without spaces."
  }
}

variable "extra_packages" {
  description = "Debian packages the user data installs besides redis-server, chrony, iptables and python3 (modules/aws with tls: awscli, for the fetch script)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for p in var.extra_packages : can(regex("^[a-z0-9][a-z0-9.+-]+$", p))])
    error_message = "extra_packages must be Debian package names."
  }
}

variable "data_dir" {
  description = "Redis working directory (append-only file)."
  type        = string
  default     = "/var/lib/redis"
  validation {
    condition     = can(regex("^/[A-Za-z0-9._/-]+$", var.data_dir))
    error_message = "data_dir must be an absolute path without spaces."
  }
}

variable "log_file" {
  description = "Redis log file; empty logs to stdout (the journal under systemd)."
  type        = string
  default     = ""
  validation {
    condition     = var.log_file == "" || can(regex("^/[A-Za-z0-9._/-]+$", var.log_file))
    error_message = "log_file must be empty or an absolute path without spaces."
  }
}

variable "guard_state_dir" {
  description = "Persistent directory where the restart guard records how Redis last stopped."
  type        = string
  default     = "/var/lib/redis-guard"
  validation {
    condition     = can(regex("^/[A-Za-z0-9._/-]+$", var.guard_state_dir))
    error_message = "guard_state_dir must be an absolute path without spaces."
  }
}

variable "guard_runtime_dir" {
  description = "Directory on tmpfs (emptied by a boot) where the guard marks that Redis has started since boot."
  type        = string
  default     = "/run/redis-guard"
  validation {
    condition     = can(regex("^/[A-Za-z0-9._/-]+$", var.guard_runtime_dir))
    error_message = "guard_runtime_dir must be an absolute path without spaces."
  }
}

variable "guard_path" {
  description = "Where the user data installs the restart guard script; the systemd unit runs it from there."
  type        = string
  default     = "/usr/local/sbin/redis-restart-guard"
  validation {
    condition     = can(regex("^/[A-Za-z0-9._/-]+$", var.guard_path))
    error_message = "guard_path must be an absolute path without spaces."
  }
}

variable "conf_path" {
  description = "Where the user data installs the rendered redis.conf (apart from Debian's /etc/redis/redis.conf, so package upgrades never prompt over it)."
  type        = string
  default     = "/etc/redis/redlock.conf"
  validation {
    condition     = can(regex("^/[A-Za-z0-9._/-]+$", var.conf_path))
    error_message = "conf_path must be an absolute path without spaces."
  }
}

variable "redis_server_path" {
  description = "The redis-server binary the systemd unit starts."
  type        = string
  default     = "/usr/bin/redis-server"
  validation {
    condition     = can(regex("^/[A-Za-z0-9._/-]+$", var.redis_server_path))
    error_message = "redis_server_path must be an absolute path without spaces."
  }
}

# The Redlock rules in redis.conf. Each assertion names the rule it protects;
# infra/verify renders the same file and starts a real redis-server with it.

variables {
  max_lock_ttl     = 10
  restart_margin   = 2
  bind_address     = "10.0.1.10"
  redlock_password = "test-redlock-password"
  monitor_password = "test-monitor-password"
}

run "durability" {
  command = plan

  assert {
    condition     = can(regex("(?m)^appendonly yes$", output.redis_conf))
    error_message = "redis.conf must turn the append-only file on (appendonly yes)."
  }
  assert {
    condition     = can(regex("(?m)^appendfsync always$", output.redis_conf))
    error_message = "redis.conf must fsync every write before replying (appendfsync always)."
  }
  assert {
    condition     = length(regexall("(?m)^appendfsync ", output.redis_conf)) == 1
    error_message = "redis.conf must set appendfsync exactly once."
  }
  assert {
    condition     = can(regex("(?m)^no-appendfsync-on-rewrite no$", output.redis_conf))
    error_message = "redis.conf must keep fsyncing during AOF rewrites (no-appendfsync-on-rewrite no)."
  }
  assert {
    condition     = can(regex("(?m)^save \"\"$", output.redis_conf))
    error_message = "redis.conf must turn RDB snapshots off (save \"\"): the AOF is the record."
  }
}

run "memory_and_independence" {
  command = plan

  assert {
    condition     = can(regex("(?m)^maxmemory-policy noeviction$", output.redis_conf))
    error_message = "redis.conf must never evict keys (maxmemory-policy noeviction)."
  }
  assert {
    condition     = can(regex("(?m)^maxmemory 256mb$", output.redis_conf))
    error_message = "redis.conf must set maxmemory, or noeviction never triggers."
  }
  assert {
    condition     = !can(regex("(?im)^\\s*(replicaof|slaveof)\\b", output.redis_conf))
    error_message = "redis.conf must not make the node a replica: Redlock nodes are independent masters."
  }
}

run "network" {
  command = plan

  assert {
    condition     = can(regex("(?m)^bind 10\\.0\\.1\\.10$", output.redis_conf))
    error_message = "redis.conf must bind to the private address only."
  }
  assert {
    condition     = can(regex("(?m)^protected-mode yes$", output.redis_conf))
    error_message = "redis.conf must keep protected mode on."
  }
  assert {
    condition     = can(regex("(?m)^port 6379$", output.redis_conf))
    error_message = "redis.conf must listen on the configured port."
  }
  assert {
    condition     = !can(regex("(?m)^tls-port", output.redis_conf))
    error_message = "TLS must be off unless tls is set."
  }
}

run "acl" {
  command = plan

  assert {
    condition     = can(regex("(?m)^user default off resetpass resetkeys resetchannels -@all$", output.redis_conf))
    error_message = "The default user must be off, without password, keys or commands."
  }
  assert {
    condition     = can(regex("(?m)^user redlock on #${sha256("test-redlock-password")} resetkeys ~lock:\\* resetchannels -@all ", output.redis_conf))
    error_message = "The redlock user must authenticate by password hash, touch only lock:* keys and start from no commands."
  }
  assert {
    condition = alltrue([
      for c in ["+set", "+get", "+del", "+pexpire", "+pttl", "+exists", "+eval", "+evalsha", "+script|load", "+ping", "+time", "+hello", "+auth"] :
      contains(split(" ", regex("(?m)^user redlock .*$", output.redis_conf)), c)
    ])
    error_message = "The redlock user must be allowed every command the library sends."
  }
  assert {
    condition = length(setintersection(
      split(" ", regex("(?m)^user redlock .*$", output.redis_conf)),
      ["+@all", "allcommands", "+flushall", "+flushdb", "+config", "+config|set", "+keys", "+replicaof", "+shutdown", "allkeys", "~*"],
    )) == 0
    error_message = "The redlock user must not get admin commands or all keys."
  }
  assert {
    condition = alltrue([
      for c in ["+info", "+config|get", "+time", "+ping", "+client|list", "+latency|latest", "+slowlog|get"] :
      contains(split(" ", regex("(?m)^user monitor .*$", output.redis_conf)), c)
    ])
    error_message = "The monitor user must read INFO, CONFIG GET, TIME, CLIENT LIST, LATENCY and SLOWLOG."
  }
  assert {
    condition = length(setintersection(
      split(" ", regex("(?m)^user monitor .*$", output.redis_conf)),
      ["+@all", "+set", "+del", "+eval", "+config", "+config|set", "+flushall", "+@write"],
    )) == 0 && !can(regex("(?m)^user monitor .*~", output.redis_conf))
    error_message = "The monitor user must be read-only and reach no keys."
  }
  assert {
    condition     = !strcontains(output.redis_conf, "test-redlock-password") && !strcontains(output.redis_conf, "test-monitor-password")
    error_message = "Passwords must never appear in clear in redis.conf."
  }
  assert {
    condition     = !strcontains(output.redis_conf, "client|setinfo")
    error_message = "Redis 7.0 refuses ACL rules naming CLIENT SETINFO (7.2+)."
  }
}

run "acl_on_redis_7_2" {
  command = plan
  variables {
    redis_version = "7.2"
  }

  assert {
    condition     = contains(split(" ", regex("(?m)^user redlock .*$", output.redis_conf)), "+client|setinfo")
    error_message = "On Redis 7.2+ the redlock user must be allowed CLIENT SETINFO, which go-redis sends on connect."
  }
}

run "acl_disabled" {
  command = plan
  variables {
    acl_enabled      = false
    redlock_password = null
    monitor_password = null
  }

  assert {
    condition     = !can(regex("(?m)^user ", output.redis_conf))
    error_message = "acl_enabled = false must render no ACL users."
  }
}

run "lab_profiles" {
  command = plan
  variables {
    fsync = "everysec"
  }

  assert {
    condition     = can(regex("(?m)^appendfsync everysec$", output.redis_conf))
    error_message = "fsync must set appendfsync."
  }
}

run "no_persistence" {
  command = plan
  variables {
    persistence = false
  }

  assert {
    condition     = can(regex("(?m)^appendonly no$", output.redis_conf)) && can(regex("(?m)^save \"\"$", output.redis_conf))
    error_message = "persistence = false must turn both the AOF and RDB snapshots off."
  }
}

run "tls" {
  command = plan
  variables {
    tls = {
      cert_file = "/etc/redis/tls/node.crt"
      key_file  = "/etc/redis/tls/node.key"
      ca_file   = "/etc/redis/tls/ca.crt"
    }
  }

  assert {
    condition     = can(regex("(?m)^port 0$", output.redis_conf)) && can(regex("(?m)^tls-port 6379$", output.redis_conf))
    error_message = "With tls, plain TCP must be off and TLS served on port."
  }
  assert {
    condition = alltrue([
      can(regex("(?m)^tls-cert-file /etc/redis/tls/node\\.crt$", output.redis_conf)),
      can(regex("(?m)^tls-key-file /etc/redis/tls/node\\.key$", output.redis_conf)),
      can(regex("(?m)^tls-ca-cert-file /etc/redis/tls/ca\\.crt$", output.redis_conf)),
    ])
    error_message = "With tls, the certificate, key and CA must be configured."
  }
}

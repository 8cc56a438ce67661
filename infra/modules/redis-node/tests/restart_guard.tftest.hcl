# Delayed restart: after a crash or a boot Redis stays down for
# max_lock_ttl * (1 + clock_drift_ratio) + restart_margin. infra/verify runs the rendered guard for real
# and passes the unit through systemd-analyze verify.

variables {
  max_lock_ttl     = 10
  restart_margin   = 2
  redlock_password = "test-redlock-password"
  monitor_password = "test-monitor-password"
}

run "delay" {
  command = plan

  assert {
    condition     = output.restart_delay_seconds == 12.1
    error_message = "restart_delay_seconds must be max_lock_ttl * (1 + clock_drift_ratio) + restart_margin."
  }
  assert {
    condition     = strcontains(output.restart_guard, "delay=\"$${REDIS_GUARD_DELAY:-12.1}\"")
    error_message = "The guard must wait restart_delay_seconds unless REDIS_GUARD_DELAY overrides it."
  }
  assert {
    condition     = strcontains(output.restart_guard, "state_dir='/var/lib/redis-guard'") && strcontains(output.restart_guard, "runtime_dir='/run/redis-guard'")
    error_message = "The guard must keep its state on disk and its boot marker on tmpfs."
  }
  assert {
    condition     = can(regex("(?m)^\\s+sleep \"\\$delay\"$", output.restart_guard))
    error_message = "The guard must actually sleep for the delay."
  }
}

run "delay_grows_with_the_ttl" {
  command = plan
  variables {
    max_lock_ttl   = 86400
    restart_margin = 1
  }

  assert {
    condition     = output.restart_delay_seconds == 87265 && strcontains(output.restart_guard, "REDIS_GUARD_DELAY:-87265}")
    error_message = "A day-long TTL must get 1% of it as drift margin (864 s), not a fixed second, as a whole number of milliseconds."
  }
}

run "fractional_delay" {
  command = plan
  variables {
    max_lock_ttl      = 1
    restart_margin    = 0.5
    clock_drift_ratio = 0
  }

  assert {
    condition     = output.restart_delay_seconds == 1.5 && strcontains(output.restart_guard, "REDIS_GUARD_DELAY:-1.5}")
    error_message = "Fractional seconds must reach the guard unrounded."
  }
}

run "unit" {
  command = plan

  assert {
    condition     = output.unit_name == "redlock-redis.service"
    error_message = "The unit must not be named like Debian's redis-server.service."
  }
  assert {
    condition     = can(regex("(?m)^Restart=always$", output.redis_unit)) && can(regex("(?m)^RestartSec=[0-9]+$", output.redis_unit))
    error_message = "The unit must always restart Redis."
  }
  assert {
    condition     = can(regex("(?ms)\\[Unit\\].*^StartLimitIntervalSec=0$.*\\[Service\\]", output.redis_unit))
    error_message = "StartLimitIntervalSec=0 must be set in [Unit]: systemd must never stop restarting."
  }
  assert {
    condition     = can(regex("(?m)^After=.*\\btime-sync\\.target\\b", output.redis_unit))
    error_message = "Redis must start after time-sync.target."
  }
  assert {
    condition     = !can(regex("(?m)^(Wants|Requires)=.*\\btime-sync\\.target\\b", output.redis_unit))
    error_message = "A consumer must not pull in time-sync.target (systemd.special(7)); the unit waits for chrony itself."
  }
  assert {
    condition     = can(regex("(?m)^ExecStartPre=\\+/usr/bin/chronyc -h /run/chrony/chronyd\\.sock waitsync 0 ", output.redis_unit)) && can(regex("(?m)^Wants=.*\\bchrony\\.service\\b", output.redis_unit)) && can(regex("(?m)^After=.*\\bchrony\\.service\\b", output.redis_unit))
    error_message = "Redis must wait for chrony to synchronise, without a time limit (ExecStartPre=chronyc waitsync 0 ...), at every start."
  }
  assert {
    condition     = can(regex("(?m)^ExecStartPre=/usr/local/sbin/redis-restart-guard pre-start$", output.redis_unit))
    error_message = "The guard must run before Redis starts."
  }
  assert {
    condition     = try(length(regex("(?s)^(.*?)\\nExecStartPre=[^\\n]*waitsync", output.redis_unit)[0]) < length(regex("(?s)^(.*?)\\nExecStartPre=/usr/local/sbin/redis-restart-guard", output.redis_unit)[0]), false)
    error_message = "chronyc waitsync must run first, so that the guard's wait runs on a synchronised clock."
  }
  assert {
    condition     = can(regex("(?m)^ExecStopPost=.*\\$\\$SERVICE_RESULT\" = success.*post-stop clean.*post-stop unclean", output.redis_unit))
    error_message = "The unit must tell the guard a clean stop ($SERVICE_RESULT = success) from any other."
  }
  assert {
    condition     = tonumber(regex("(?m)^TimeoutStartSec=([0-9]+)$", output.redis_unit)[0]) > output.restart_delay_seconds
    error_message = "TimeoutStartSec must outlast the guard's wait."
  }
  assert {
    condition     = can(regex("(?m)^ExecPaths=.*/usr/local/sbin/redis-restart-guard", output.redis_unit)) && can(regex("(?m)^ReadWritePaths=.*/var/lib/redis-guard /run/redis-guard", output.redis_unit))
    error_message = "The hardening must let the guard run and write its state."
  }
  assert {
    condition     = try(length(setintersection(split(" ", trimprefix(regex("(?m)^ExecPaths=.*$", output.redis_unit), "ExecPaths=")), ["/", "/bin", "/usr/bin", "/sbin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin", "/lib", "/usr/lib", "-/lib64", "-/usr/lib64"])) == 0, false) && can(regex("(?m)^NoExecPaths=/$", output.redis_unit))
    error_message = "ExecPaths must name programs, not directories of programs: Redis may run nothing else."
  }
  assert {
    condition     = can(regex("(?m)^IPAddressDeny=any$", output.redis_unit)) && can(regex("(?m)^IPAddressAllow=localhost$", output.redis_unit))
    error_message = "The unit must deny every address but localhost and client_cidrs (IPAddressDeny=any, IPAddressAllow=)."
  }
  assert {
    condition     = can(regex("(?m)^ProtectProc=invisible$", output.redis_unit)) && can(regex("(?m)^RemoveIPC=true$", output.redis_unit))
    error_message = "The unit must hide other processes (ProtectProc=invisible) and remove its IPC objects (RemoveIPC=true)."
  }
  assert {
    condition     = try(tonumber(regex("(?m)^OOMScoreAdjust=(-[0-9]+)$", output.redis_unit)[0]) < -100 && tonumber(regex("(?m)^OOMScoreAdjust=(-[0-9]+)$", output.redis_unit)[0]) > -1000, false)
    error_message = "OOMScoreAdjust must make the OOM killer take other processes first, yet leave Redis killable (between -1000 and -100)."
  }
  assert {
    condition     = can(regex("(?m)^RequiresMountsFor=/var/lib/redis$", output.redis_unit))
    error_message = "Redis must not start before the data directory's file system is mounted."
  }
  assert {
    condition     = can(regex("(?m)^ExecStart=/usr/bin/redis-server /etc/redis/redlock\\.conf$", output.redis_unit))
    error_message = "The unit must start redis-server with the rendered configuration."
  }
}

run "no_persistence_always_waits" {
  command = plan
  variables {
    persistence = false
  }

  assert {
    condition     = strcontains(output.restart_guard, "persistence='false'")
    error_message = "Without persistence the guard must wait after every stop."
  }
}

run "firewall_admits_the_clients" {
  command = plan
  variables {
    client_cidrs = ["10.0.0.0/16", "2001:db8::/32"]
  }

  assert {
    condition     = can(regex("(?m)^IPAddressAllow=localhost 10\\.0\\.0\\.0/16 2001:db8::/32$", output.redis_unit))
    error_message = "IPAddressAllow must list localhost and every client_cidrs block."
  }
}

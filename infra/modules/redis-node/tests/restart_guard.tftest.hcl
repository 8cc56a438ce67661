# Delayed restart: after a crash or a boot Redis stays down for
# max_lock_ttl + restart_margin. infra/verify runs the rendered guard for real
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
    condition     = output.restart_delay_seconds == 12
    error_message = "restart_delay_seconds must be max_lock_ttl + restart_margin."
  }
  assert {
    condition     = strcontains(output.restart_guard, "delay=\"$${REDIS_GUARD_DELAY:-12}\"")
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

run "fractional_delay" {
  command = plan
  variables {
    max_lock_ttl   = 1
    restart_margin = 0.5
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
    condition     = can(regex("(?m)^After=.*\\btime-sync\\.target\\b", output.redis_unit)) && can(regex("(?m)^Wants=.*\\btime-sync\\.target\\b", output.redis_unit))
    error_message = "Redis must start after time-sync.target (stepping is over by then)."
  }
  assert {
    condition     = can(regex("(?m)^ExecStartPre=/usr/local/sbin/redis-restart-guard pre-start$", output.redis_unit))
    error_message = "The guard must run before Redis starts."
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

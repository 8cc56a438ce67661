# Slew-only time: chrony may step the clock only while the node boots.

variables {
  max_lock_ttl     = 10
  redlock_password = "test-redlock-password"
  monitor_password = "test-monitor-password"
  ntp_servers      = ["169.254.169.123", "time.example.org"]
}

run "sources" {
  command = plan

  assert {
    condition     = can(regex("(?m)^server 169\\.254\\.169\\.123 prefer iburst$", output.chrony_conf)) && can(regex("(?m)^server time\\.example\\.org iburst$", output.chrony_conf))
    error_message = "chrony.conf must use every ntp_servers entry with iburst, and prefer the first."
  }
  assert {
    condition     = !can(regex("(?m)^(pool|sourcedir|confdir|include) ", output.chrony_conf))
    error_message = "chrony.conf must use only the configured servers (no pools, DHCP or drop-in sources)."
  }
}

run "aws_poll_interval" {
  command = plan
  variables {
    ntp_poll_exponent = 4
  }

  assert {
    condition     = can(regex("(?m)^server 169\\.254\\.169\\.123 prefer iburst minpoll 4 maxpoll 4$", output.chrony_conf)) && can(regex("(?m)^server time\\.example\\.org iburst minpoll 4 maxpoll 4$", output.chrony_conf))
    error_message = "ntp_poll_exponent must poll every server at that interval (AWS: prefer iburst minpoll 4 maxpoll 4)."
  }
}

run "slew_only" {
  command = plan

  assert {
    condition     = can(regex("(?m)^makestep 1 1$", output.chrony_conf))
    error_message = "makestep must allow a step at the first update only (makestep 1 1): the unit's waitsync holds Redis until that update."
  }
  assert {
    condition     = length(regexall("(?m)^makestep ", output.chrony_conf)) == 1
    error_message = "makestep must appear exactly once."
  }
  assert {
    condition     = tonumber(regex("(?m)^maxslewrate ([0-9.]+)$", output.chrony_conf)[0]) <= 500
    error_message = "maxslewrate must be at most 500 ppm."
  }
  assert {
    condition     = can(regex("(?m)^leapsecmode slew$", output.chrony_conf))
    error_message = "Leap seconds must be slewed (leapsecmode slew)."
  }
  assert {
    condition     = can(regex("(?m)^maxchange [0-9.]+ [0-9]+ [0-9]+$", output.chrony_conf))
    error_message = "maxchange must refuse huge offsets after the first update."
  }
}

run "timesyncd_disabled" {
  command = plan

  assert {
    condition     = contains([for c in yamldecode(output.cloud_init).runcmd : join(" ", c)], "systemctl mask systemd-timesyncd.service")
    error_message = "The user data must disable systemd-timesyncd: one time daemon only."
  }
}

run "no_step_once_redis_ran" {
  command = plan

  assert {
    condition     = strcontains(output.chrony_dropin, "ExecStart=\nExecStart=!/bin/sh -c 'if [ -e /run/redis-guard/started ]; then exec /usr/sbin/chronyd $$DAEMON_OPTS -R; fi; exec /usr/sbin/chronyd $$DAEMON_OPTS'")
    error_message = "A chronyd restarted after Redis ran this boot (the guard's marker) must get -R, which ignores makestep."
  }
  assert {
    condition     = one([for f in yamldecode(output.cloud_init).write_files : f.content if f.path == "/etc/systemd/system/chrony.service.d/redlock-redis.conf"]) == output.chrony_dropin
    error_message = "The user data must install the chrony drop-in."
  }
}

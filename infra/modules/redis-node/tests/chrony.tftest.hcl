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
    condition     = can(regex("(?m)^server 169\\.254\\.169\\.123 iburst$", output.chrony_conf)) && can(regex("(?m)^server time\\.example\\.org iburst$", output.chrony_conf))
    error_message = "chrony.conf must use every ntp_servers entry with iburst."
  }
  assert {
    condition     = !can(regex("(?m)^(pool|sourcedir|confdir|include) ", output.chrony_conf))
    error_message = "chrony.conf must use only the configured servers (no pools, DHCP or drop-in sources)."
  }
}

run "slew_only" {
  command = plan

  assert {
    condition     = can(regex("(?m)^makestep 1 [1-3]$", output.chrony_conf))
    error_message = "makestep must be limited to the first few updates at boot (makestep 1 3)."
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

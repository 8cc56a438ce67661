# The user data carries every rendered file unchanged and wires it up.
# infra/verify passes it through `cloud-init schema`.

variables {
  max_lock_ttl     = 10
  redlock_password = "test-redlock-password"
  monitor_password = "test-monitor-password"
}

run "files" {
  command = plan

  assert {
    condition     = startswith(output.cloud_init, "#cloud-config\n")
    error_message = "User data must start with #cloud-config."
  }
  assert {
    condition     = length(setsubtract(["redis-server", "chrony"], yamldecode(output.cloud_init).packages)) == 0
    error_message = "User data must install redis-server and chrony."
  }
  assert {
    condition = alltrue([
      for path, want in {
        "/etc/redis/redlock.conf"                   = output.redis_conf
        "/etc/chrony/chrony.conf"                   = output.chrony_conf
        "/etc/systemd/system/redlock-redis.service" = output.redis_unit
        "/usr/local/sbin/redis-restart-guard"       = output.restart_guard
        "/etc/tmpfiles.d/redlock-redis.conf"        = output.tmpfiles_conf
      } : one([for f in yamldecode(output.cloud_init).write_files : f.content if f.path == path]) == want
    ])
    error_message = "Every rendered file must reach the node byte for byte."
  }
  assert {
    condition     = one([for f in yamldecode(output.cloud_init).write_files : f.permissions if f.path == "/usr/local/sbin/redis-restart-guard"]) == "0755"
    error_message = "The guard must be executable."
  }
  assert {
    condition     = one([for f in yamldecode(output.cloud_init).write_files : f.permissions if f.path == "/etc/redis/redlock.conf"]) == "0640"
    error_message = "redis.conf (password hashes) must not be world-readable."
  }
}

run "services" {
  command = plan

  assert {
    condition = length(setsubtract([
      "systemctl mask redis-server.service",
      "systemctl mask systemd-timesyncd.service",
      "systemctl enable chrony-wait.service",
      "systemctl enable --now --no-block redlock-redis.service",
    ], [for c in yamldecode(output.cloud_init).runcmd : join(" ", c)])) == 0
    error_message = "User data must mask Debian's redis and timesyncd, make time-sync.target wait for chrony and enable the guarded unit."
  }
  assert {
    condition     = !strcontains(output.cloud_init, "test-redlock-password")
    error_message = "Passwords must never appear in clear in the user data."
  }
}

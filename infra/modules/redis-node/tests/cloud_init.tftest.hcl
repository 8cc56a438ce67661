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
    condition     = length(setsubtract(["iptables", "python3"], yamldecode(output.cloud_init).packages)) == 0
    error_message = "User data must install what the faults over SSH run beyond Debian's base system: iptables (partition) and python3 (clock-jump)."
  }
  assert {
    condition = alltrue([
      for path, want in {
        "/etc/redis/redlock.conf"                   = output.redis_conf
        "/etc/chrony/chrony.conf"                   = output.chrony_conf
        "/etc/systemd/system/redlock-redis.service" = output.redis_unit
        "/usr/local/sbin/redis-restart-guard"       = output.restart_guard
        "/etc/tmpfiles.d/redlock-redis.conf"        = output.tmpfiles_conf
        "/etc/sysctl.d/60-redlock-redis.conf"       = output.sysctl_conf
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
  assert {
    condition = (
      index([for c in yamldecode(output.cloud_init).runcmd : join(" ", c)], "systemctl daemon-reload") < index([for c in yamldecode(output.cloud_init).runcmd : join(" ", c)], "systemctl restart chrony.service")
      && index([for c in yamldecode(output.cloud_init).runcmd : join(" ", c)], "systemctl restart systemd-sysctl.service") < index([for c in yamldecode(output.cloud_init).runcmd : join(" ", c)], "systemctl enable --now --no-block redlock-redis.service")
    )
    error_message = "The user data must reload systemd before restarting chrony (its drop-in) and apply the sysctl before Redis starts."
  }
}

run "overcommit" {
  command = plan

  assert {
    condition     = can(regex("(?m)^vm\\.overcommit_memory = 1$", output.sysctl_conf))
    error_message = "The node must allow memory overcommit (vm.overcommit_memory = 1): an AOF rewrite forks Redis."
  }
}

run "no_data_volume" {
  command = plan

  assert {
    condition     = output.fstab_line == "" && length([for f in yamldecode(output.cloud_init).write_files : f if f.path == "/etc/fstab"]) == 0
    error_message = "Without data_device the user data must leave /etc/fstab alone."
  }
}

run "data_volume" {
  command = plan
  variables {
    data_device = "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0"
  }

  assert {
    condition     = output.fstab_line == "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0 /var/lib/redis ext4 defaults,noatime,nofail,x-systemd.makefs,x-systemd.growfs,x-systemd.device-timeout=10min 0 2\n"
    error_message = "The data volume must be mounted on data_dir, made ext4 when blank, grown to the device, and optional for the boot (nofail)."
  }
  assert {
    condition     = try(one([for f in yamldecode(output.cloud_init).write_files : f if f.path == "/etc/fstab"]).append, false) && one([for f in yamldecode(output.cloud_init).write_files : f.content if f.path == "/etc/fstab"]) == output.fstab_line
    error_message = "The user data must append the data volume's line to /etc/fstab, not replace the file."
  }
  assert {
    condition     = can(regex("(?m)^RequiresMountsFor=/var/lib/redis$", output.redis_unit))
    error_message = "Redis must not start before the data volume is mounted."
  }
}

# EC2 takes at most 16 KB of user data; modules/aws gzips it. Even plain, a
# node with every option set must fit.
run "fits_ec2_user_data" {
  command = plan
  variables {
    redis_version     = "7.2"
    ntp_servers       = ["169.254.169.123", "0.amazon.pool.ntp.org", "1.amazon.pool.ntp.org", "2.amazon.pool.ntp.org"]
    ntp_poll_exponent = 4
    client_cidrs      = ["10.0.0.0/16", "10.1.0.0/16", "2001:db8::/32"]
    data_device       = "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0"
    tls = {
      cert_file = "/etc/redis/tls/node.crt"
      key_file  = "/etc/redis/tls/node.key"
      ca_file   = "/etc/redis/tls/ca.crt"
    }
  }

  assert {
    condition     = length(base64encode(output.cloud_init)) * 3 / 4 <= 16384
    error_message = "The user data must stay within EC2's 16 KB, even uncompressed."
  }
}

# A TLS node whose files come from the platform (modules/aws: SSM): the
# fetch script is installed root-only and runs before every start of Redis.
run "tls_fetch" {
  command = plan
  variables {
    tls = {
      cert_file = "/etc/redis/tls/node.crt"
      key_file  = "/etc/redis/tls/node.key"
      ca_file   = "/etc/redis/tls/ca.crt"
    }
    tls_fetch_script = "#!/bin/sh\necho fetch\n"
    extra_packages   = ["awscli"]
  }

  assert {
    condition     = one([for f in yamldecode(output.cloud_init).write_files : f.permissions if f.path == "/usr/local/sbin/redlock-tls-fetch"]) == "0700"
    error_message = "The fetch script must be installed root-only."
  }
  assert {
    condition     = one([for f in yamldecode(output.cloud_init).write_files : f.content if f.path == "/usr/local/sbin/redlock-tls-fetch"]) == "#!/bin/sh\necho fetch\n"
    error_message = "The fetch script must reach the node byte for byte."
  }
  assert {
    condition     = can(regex("(?m)^ExecStartPre=\\+/usr/bin/systemctl start redlock-tls-fetch\\.service$", output.redis_unit))
    error_message = "The unit must have the TLS files fetched before Redis starts."
  }
  assert {
    condition = alltrue([
      can(regex("(?m)^ExecStart=/usr/local/sbin/redlock-tls-fetch$", output.tls_fetch_unit)),
      can(regex("(?m)^Type=oneshot$", output.tls_fetch_unit)),
      !can(regex("(?m)^IPAddress", output.tls_fetch_unit)),
      one([for f in yamldecode(output.cloud_init).write_files : f.content if f.path == "/etc/systemd/system/redlock-tls-fetch.service"]) == output.tls_fetch_unit,
    ])
    error_message = "The fetch runs in a oneshot unit of its own, outside Redis's IP firewall, installed by the user data."
  }
  assert {
    condition     = contains(yamldecode(output.cloud_init).packages, "awscli") && contains(yamldecode(output.cloud_init).packages, "redis-server")
    error_message = "extra_packages must be installed beside redis-server."
  }
}

run "no_tls_fetch_by_default" {
  command = plan

  assert {
    condition     = !strcontains(output.redis_unit, "redlock-tls-fetch") && !strcontains(output.cloud_init, "redlock-tls-fetch")
    error_message = "Without tls_fetch_script nothing is fetched."
  }
}

run "tls_fetch_needs_tls" {
  command = plan
  variables {
    tls_fetch_script = "#!/bin/sh\n"
  }
  expect_failures = [output.cloud_init]
}

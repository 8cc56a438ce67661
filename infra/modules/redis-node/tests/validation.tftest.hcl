# Inputs that would break a rule are refused at plan time.

variables {
  max_lock_ttl     = 10
  redlock_password = "test-redlock-password"
  monitor_password = "test-monitor-password"
}

run "fsync_unknown" {
  command = plan
  variables { fsync = "sometimes" }
  expect_failures = [var.fsync]
}

run "port_zero" {
  command = plan
  variables { port = 0 }
  expect_failures = [var.port]
}

run "bind_wildcard" {
  command = plan
  variables { bind_address = "0.0.0.0" }
  expect_failures = [var.bind_address]
}

run "bind_not_an_address" {
  command = plan
  variables { bind_address = "10.0.0.1 0.0.0.0" }
  expect_failures = [var.bind_address]
}

run "ttl_negative" {
  command = plan
  variables { max_lock_ttl = -1 }
  expect_failures = [var.max_lock_ttl]
}

# 0 is the local lab's "restart at once" (modules/aws refuses it).
run "ttl_zero_no_margin" {
  command = plan
  variables {
    max_lock_ttl   = 0
    restart_margin = 0
  }
  assert {
    condition     = output.restart_delay_seconds == 0 && strcontains(output.restart_guard, "REDIS_GUARD_DELAY:-0}")
    error_message = "max_lock_ttl 0 with restart_margin 0 renders a guard that does not wait."
  }
}

run "margin_negative" {
  command = plan
  variables { restart_margin = -1 }
  expect_failures = [var.restart_margin]
}

run "maxmemory_garbage" {
  command = plan
  variables { maxmemory = "lots" }
  expect_failures = [var.maxmemory]
}

run "password_short" {
  command = plan
  variables { redlock_password = "short" }
  expect_failures = [var.redlock_password]
}

run "ntp_injection" {
  command = plan
  variables { ntp_servers = ["pool.example.org iburst\nmakestep 1 -1"] }
  expect_failures = [var.ntp_servers]
}

run "ntp_empty" {
  command = plan
  variables { ntp_servers = [] }
  expect_failures = [var.ntp_servers]
}

run "redis_too_old" {
  command = plan
  variables { redis_version = "6.2" }
  expect_failures = [var.redis_version]
}

run "relative_data_dir" {
  command = plan
  variables { data_dir = "data" }
  expect_failures = [var.data_dir]
}

run "acl_without_passwords" {
  command = plan
  variables {
    redlock_password = null
    monitor_password = null
  }
  expect_failures = [output.redis_conf, output.cloud_init]
}

run "drift_ratio_negative" {
  command = plan
  variables { clock_drift_ratio = -0.01 }
  expect_failures = [var.clock_drift_ratio]
}

run "poll_exponent_out_of_range" {
  command = plan
  variables { ntp_poll_exponent = 30 }
  expect_failures = [var.ntp_poll_exponent]
}

run "client_cidrs_not_a_block" {
  command = plan
  variables { client_cidrs = ["10.0.0.0/16 0.0.0.0/0"] }
  expect_failures = [var.client_cidrs]
}

run "client_cidrs_everyone" {
  command = plan
  variables { client_cidrs = ["0.0.0.0/0"] }
  expect_failures = [var.client_cidrs]
}

run "data_device_not_a_device" {
  command = plan
  variables { data_device = "nvme1n1" }
  expect_failures = [var.data_device]
}

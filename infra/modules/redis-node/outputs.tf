output "redis_conf" {
  description = "redis.conf text. Sensitive: it carries the ACL password hashes."
  value       = local.redis_conf
  sensitive   = true

  precondition {
    condition     = !var.acl_enabled || (var.redlock_password != null && var.monitor_password != null)
    error_message = "acl_enabled needs redlock_password and monitor_password."
  }
}

output "chrony_conf" {
  description = "chrony.conf text: slew-only after boot."
  value       = local.chrony_conf
}

output "chrony_dropin" {
  description = "Drop-in for chrony.service (chrony.service.d/redlock-redis.conf): a chronyd restarted after Redis ran this boot may not step the clock (-R)."
  value       = local.chrony_dropin
}

output "sysctl_conf" {
  description = "sysctl.d entry: vm.overcommit_memory = 1, so that the fork of an append-only file rewrite cannot fail."
  value       = local.sysctl_conf
}

output "fstab_line" {
  description = "The /etc/fstab line mounting data_device on data_dir; empty without data_device."
  value       = local.fstab_line
}

output "redis_unit" {
  description = "systemd unit text for redlock-redis.service (restart guarded)."
  value       = local.redis_unit
}

output "tls_fetch_unit" {
  description = "With tls_fetch_script: the systemd unit (redlock-tls-fetch.service) that runs it, which redlock-redis.service starts before every start of Redis; null without."
  value       = local.tls_fetch_unit
}

output "unit_name" {
  description = "Name the systemd unit is installed under."
  value       = local.unit_name
}

output "restart_guard" {
  description = "The restart guard script (bash): `pre-start`, `post-stop clean|unclean`."
  value       = local.restart_guard
}

output "restart_delay_seconds" {
  description = "How long the guard holds Redis back after an unclean stop or a boot: max_lock_ttl * (1 + clock_drift_ratio) + restart_margin, rounded up to the millisecond."
  value       = local.restart_delay
}

output "tmpfiles_conf" {
  description = "systemd-tmpfiles entries creating the data, guard state and guard runtime directories."
  value       = local.tmpfiles_conf
}

output "cloud_init" {
  description = "#cloud-config user data installing and wiring all of the above. Sensitive: it embeds redis_conf."
  value       = local.cloud_init
  sensitive   = true

  precondition {
    condition     = var.tls_fetch_script == null || var.tls != null
    error_message = "tls_fetch_script fetches the files of tls: set tls too."
  }

  precondition {
    condition     = !var.acl_enabled || (var.redlock_password != null && var.monitor_password != null)
    error_message = "acl_enabled needs redlock_password and monitor_password."
  }
}

# Renders every file a Redlock node boots with. No resources and no provider:
# the outputs are the product, consumed by modules/aws (cloud-init user data)
# and by the local lab (the same files under a different supervisor).

locals {
  unit_name = "redlock-redis.service"
  # The delay grows with the TTL (a day-long TTL needs more than a fixed
  # second of margin), rounded up to the millisecond: Terraform's decimal
  # arithmetic would otherwise hand the guard 87264.999... for a day.
  restart_delay = ceil((var.max_lock_ttl * (1 + var.clock_drift_ratio) + var.restart_margin) * 1000 - 0.000001) / 1000

  tmpfiles_path = "/etc/tmpfiles.d/redlock-redis.conf"

  # The unit's start timeout must outlast the guard's wait plus the time Redis
  # needs to load its append-only file; otherwise systemd would kill the guard
  # and the unit would never come up after a crash.
  start_timeout = ceil(local.restart_delay) + 300

  redis_minor = tonumber(split(".", var.redis_version)[1])
  redis_major = tonumber(split(".", var.redis_version)[0])
  # CLIENT SETINFO (sent by go-redis on connect) exists from Redis 7.2; naming
  # it in an ACL on 7.0 stops redis-server from starting.
  has_client_setinfo = local.redis_major > 7 || local.redis_minor >= 2

  # Commands a go-redis client sends while connecting, whatever it then does.
  connect_commands = concat(
    ["+hello", "+auth", "+ping", "+client|setname"],
    local.has_client_setinfo ? ["+client|setinfo"] : [],
  )
  # SET NX PX to acquire; Lua compare-and-delete / compare-and-pexpire (EVALSHA,
  # EVAL on NOSCRIPT, SCRIPT LOAD) to release and extend; the script calls GET,
  # DEL and PEXPIRE, which the ACL checks too; PTTL and TIME for diagnostics.
  # EXISTS: node-redlock's acquire script checks the key with it before its SET.
  redlock_commands = concat(local.connect_commands, [
    "+set", "+get", "+del", "+pexpire", "+pttl", "+exists",
    "+eval", "+evalsha", "+script|load", "+script|exists", "+time",
  ])
  # Read-only: what the doctor (CONFIG GET, INFO, TIME) and an exporter read.
  monitor_commands = concat(local.connect_commands, [
    "+info", "+config|get", "+time", "+role", "+dbsize",
    "+client|list", "+client|info", "+slowlog|get", "+slowlog|len",
    "+latency|latest", "+latency|history", "+latency|doctor", "+memory|stats",
  ])

  acl_lines = var.acl_enabled ? concat([
    "user default off resetpass resetkeys resetchannels -@all",
    "user redlock on #${sha256(coalesce(var.redlock_password, "-"))} resetkeys ~${var.lock_key_prefix}* resetchannels -@all ${join(" ", local.redlock_commands)}",
    "user monitor on #${sha256(coalesce(var.monitor_password, "-"))} resetkeys resetchannels -@all ${join(" ", local.monitor_commands)}",
    ], var.lab_admin_password == null ? [] : [
    # Lab only (see lab_admin_password): the local lab's supervisor.
    "user admin on #${sha256(var.lab_admin_password)} resetkeys ~* resetchannels &* +@all",
  ]) : []

  redis_conf = templatefile("${path.module}/templates/redis.conf.tftpl", {
    bind_address = var.bind_address
    port         = var.port
    tls          = var.tls
    data_dir     = var.data_dir
    log_file     = var.log_file
    persistence  = var.persistence
    fsync        = var.fsync
    maxmemory    = var.maxmemory
    acl_lines    = local.acl_lines
  })

  chrony_conf = templatefile("${path.module}/templates/chrony.conf.tftpl", {
    ntp_servers   = var.ntp_servers
    poll_exponent = var.ntp_poll_exponent
  })

  chrony_dropin = templatefile("${path.module}/templates/chrony-redlock.conf.tftpl", {
    boot_marker = "${var.guard_runtime_dir}/started"
  })

  sysctl_conf = file("${path.module}/templates/sysctl.conf")

  # x-systemd.makefs formats the volume only when it carries no file system;
  # nofail keeps a node whose volume is missing bootable (and reachable by
  # an operator), while RequiresMountsFor= in the unit keeps Redis down.
  fstab_line = var.data_device == null ? "" : "${var.data_device} ${var.data_dir} ext4 defaults,noatime,nofail,x-systemd.makefs,x-systemd.growfs,x-systemd.device-timeout=10min 0 2\n"

  restart_guard = templatefile("${path.module}/templates/restart-guard.sh.tftpl", {
    delay_seconds     = local.restart_delay
    guard_state_dir   = var.guard_state_dir
    guard_runtime_dir = var.guard_runtime_dir
    persistence       = var.persistence
  })

  read_write_paths = distinct(compact([
    var.data_dir,
    var.guard_state_dir,
    var.guard_runtime_dir,
    var.log_file == "" ? "" : dirname(var.log_file),
  ]))

  tls_fetch_path = var.tls_fetch_script == null ? null : var.tls_fetch_path
  tls_fetch_unit = var.tls_fetch_script == null ? null : templatefile("${path.module}/templates/redlock-tls-fetch.service.tftpl", {
    tls_fetch_path = var.tls_fetch_path
  })

  redis_unit = templatefile("${path.module}/templates/redlock-redis.service.tftpl", {
    tls_fetch_path    = local.tls_fetch_path
    guard_path        = var.guard_path
    redis_server_path = var.redis_server_path
    conf_path         = var.conf_path
    data_dir          = var.data_dir
    tmpfiles_path     = local.tmpfiles_path
    start_timeout     = local.start_timeout
    read_write_paths  = local.read_write_paths
    client_cidrs      = var.client_cidrs
  })

  tmpfiles_conf = templatefile("${path.module}/templates/tmpfiles.conf.tftpl", {
    dirs = distinct([var.data_dir, var.guard_state_dir, var.guard_runtime_dir])
  })

  # Redis and chrony, and what the faults over SSH run that a Debian cloud
  # image lacks (infra/hostfault): iptables for partitions, python3 for the
  # clock step (cloud-init's own dependency, named so that nothing relies
  # on it by accident). tc (iproute2) and the rest are Debian's base system.
  packages = distinct(concat(["redis-server", "chrony", "iptables", "python3"], var.extra_packages))

  cloud_init = templatefile("${path.module}/templates/cloud-init.yaml.tftpl", {
    packages         = local.packages
    tls_fetch_path   = local.tls_fetch_path
    tls_fetch_script = var.tls_fetch_script
    tls_fetch_unit   = local.tls_fetch_unit
    unit_name        = local.unit_name
    guard_path       = var.guard_path
    conf_path        = var.conf_path
    tmpfiles_path    = local.tmpfiles_path
    redis_conf       = local.redis_conf
    chrony_conf      = local.chrony_conf
    chrony_dropin    = local.chrony_dropin
    sysctl_conf      = local.sysctl_conf
    fstab_line       = local.fstab_line
    redis_unit       = local.redis_unit
    restart_guard    = local.restart_guard
    tmpfiles_conf    = local.tmpfiles_conf
  })
}

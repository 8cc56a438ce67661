variable "name" {
  description = "Name prefix of every resource (instances, security group, placement group)."
  type        = string
  default     = "redlock"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,23}$", var.name))
    error_message = "name must start with a letter and use at most 24 lowercase letters, digits and '-'."
  }
}

variable "node_count" {
  description = "Independent Redis masters for Redlock; odd, so that a majority exists."
  type        = number
  default     = 5
  validation {
    condition     = var.node_count >= 3 && var.node_count % 2 == 1
    error_message = "node_count must be an odd number >= 3."
  }
}

variable "vpc_id" {
  description = "VPC of the subnets; the security group is created in it."
  type        = string
  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123abcd."
  }
}

variable "subnet_ids" {
  description = "Private subnets, node i goes to subnet i. Give one per node, in as many availability zones as the region has: no zone may hold half the nodes or more (checked at plan time), so losing a zone leaves a majority."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 3 && alltrue([for s in var.subnet_ids : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "subnet_ids must list at least 3 subnet ids (subnet-0123abcd)."
  }
  validation {
    condition     = length(distinct(var.subnet_ids)) == length(var.subnet_ids)
    error_message = "subnet_ids must be distinct: every node gets a subnet of its own."
  }
}

variable "private_ip_hostnum" {
  description = "Host number of each node's fixed private address within its subnet (cidrhost). A fixed address lets redis.conf bind to it before the instance exists and keeps the client node list stable when a node is replaced."
  type        = number
  default     = 10
  validation {
    condition     = var.private_ip_hostnum >= 4 && floor(var.private_ip_hostnum) == var.private_ip_hostnum
    error_message = "private_ip_hostnum must be an integer >= 4 (AWS reserves the first four addresses of a subnet)."
  }
}

variable "client_cidrs" {
  description = "CIDR blocks of the lock clients (and the monitoring host); the only sources admitted to the Redis port."
  type        = list(string)
  validation {
    condition     = length(var.client_cidrs) > 0 && alltrue([for c in var.client_cidrs : can(cidrhost(c, 0))])
    error_message = "client_cidrs must list at least one valid CIDR block."
  }
  validation {
    condition     = length(setintersection(toset(var.client_cidrs), toset(["0.0.0.0/0", "::/0"]))) == 0
    error_message = "client_cidrs must not open the Redis port to the whole internet (0.0.0.0/0, ::/0)."
  }
}

variable "egress_cidrs" {
  description = "Destinations the nodes may reach for packages (TCP 80/443) and NTP (UDP 123). The Amazon Time Sync Service (169.254.169.123) is link-local and needs no rule."
  type        = list(string)
  default     = ["0.0.0.0/0"]
  validation {
    condition     = alltrue([for c in var.egress_cidrs : can(cidrhost(c, 0))])
    error_message = "egress_cidrs must be valid CIDR blocks."
  }
}

variable "redis_port" {
  description = "TCP port of Redis on every node."
  type        = number
  default     = 6379
  validation {
    condition     = var.redis_port >= 1 && var.redis_port <= 65535 && floor(var.redis_port) == var.redis_port
    error_message = "redis_port must be an integer between 1 and 65535."
  }
}

variable "max_lock_ttl" {
  description = "Longest lock TTL any client uses, in seconds. A node that crashed or booted stays down this long plus restart_margin."
  type        = number
  validation {
    condition     = var.max_lock_ttl > 0 && var.max_lock_ttl <= 86400
    error_message = "max_lock_ttl must be > 0 and <= 86400 seconds."
  }
}

variable "restart_margin" {
  description = "Seconds added to max_lock_ttl for the restart delay (clock drift, acquisition time)."
  type        = number
  default     = 1
  validation {
    condition     = var.restart_margin >= 0 && var.restart_margin <= 3600
    error_message = "restart_margin must be between 0 and 3600 seconds."
  }
}

variable "maxmemory" {
  description = "Redis maxmemory per node (e.g. \"512mb\"); keep it well below the instance's memory."
  type        = string
  default     = "512mb"
  validation {
    condition     = can(regex("^[1-9][0-9]*([kKmMgG][bB]?|[bB])?$", var.maxmemory))
    error_message = "maxmemory must be a positive size such as 512mb or 2gb."
  }
}

variable "ntp_servers" {
  description = "NTP servers for chrony; the first is preferred. The default is the Amazon Time Sync Service, which every instance reaches and which smears leap seconds; do not mix it with non-smearing servers."
  type        = list(string)
  default     = ["169.254.169.123"]
  validation {
    condition     = length(var.ntp_servers) > 0
    error_message = "ntp_servers must list at least one server."
  }
}

variable "ntp_poll_exponent" {
  description = "chrony polls every NTP server each 2^ntp_poll_exponent seconds (minpoll = maxpoll). 4 (16 s) is what AWS recommends for the Amazon Time Sync Service; use 6 or more (or null, chrony's 64-1024 s) for public servers."
  type        = number
  default     = 4
  validation {
    condition     = var.ntp_poll_exponent == null ? true : (var.ntp_poll_exponent >= -6 && var.ntp_poll_exponent <= 24 && floor(var.ntp_poll_exponent) == var.ntp_poll_exponent)
    error_message = "ntp_poll_exponent must be null or an integer from -6 to 24."
  }
}

variable "node_generations" {
  description = "Generation of each node, by node index (\"0\" to \"4\"); a missing node is generation 0. A change of the user data (passwords, TTL, memory, templates), the image or the instance type replaces no node by itself: raise one node's generation per apply, and that node alone is replaced with the current configuration (README: Change and roll)."
  type        = map(number)
  default     = {}
  validation {
    condition     = alltrue([for k, g in var.node_generations : can(regex("^[0-9]{1,2}$", k)) && g >= 0 && floor(g) == g])
    error_message = "node_generations must map node indexes (\"0\", \"1\", ...) to whole numbers >= 0."
  }
}

variable "data_volume" {
  description = "Each node's EBS volume for the append-only file, apart from the root volume (whose IOPS the OS and the journal share): size in GiB, type (gp3, io1 or io2; not gp2, whose burst credits run out under fsync always), iops (gp3: 3000-16000, default 3000; io1/io2: required, 100-64000) and throughput in MiB/s (gp3 only: 125-1000, default 125). Type, iops, throughput and a larger size are changed in place, online; the file system grows at the next boot."
  type = object({
    size       = optional(number, 10)
    type       = optional(string, "gp3")
    iops       = optional(number)
    throughput = optional(number)
  })
  default  = {}
  nullable = false
  validation {
    condition     = var.data_volume.size >= 1 && var.data_volume.size <= 16384 && floor(var.data_volume.size) == var.data_volume.size
    error_message = "data_volume.size must be a whole number of GiB from 1 to 16384."
  }
  validation {
    condition     = contains(["gp3", "io1", "io2"], var.data_volume.type)
    error_message = "data_volume.type must be gp3, io1 or io2."
  }
  validation {
    condition = (
      var.data_volume.type == "gp3"
      ? (var.data_volume.iops == null ? true : var.data_volume.iops >= 3000 && var.data_volume.iops <= 16000)
      : (var.data_volume.iops == null ? false : var.data_volume.iops >= 100 && var.data_volume.iops <= 64000)
    )
    error_message = "data_volume.iops must be 3000-16000 (or null) for gp3, and is required, 100-64000, for io1 and io2."
  }
  validation {
    condition = (
      var.data_volume.throughput == null ? true : var.data_volume.type == "gp3" && var.data_volume.throughput >= 125 && var.data_volume.throughput <= 1000
    )
    error_message = "data_volume.throughput (MiB/s) applies to gp3 only, from 125 to 1000."
  }
}

variable "placement_group_name" {
  description = "Name of the spread placement group; null makes one unique to this state (name-spread-<8 random hex>). Placement group names are unique per region, so two deployments with the same name (staging and production) must not share one. Set it to \"<name>-spread\" to keep the group of a deployment made before this variable existed."
  type        = string
  default     = null
  validation {
    condition     = var.placement_group_name == null ? true : can(regex("^[A-Za-z0-9._-]{1,255}$", var.placement_group_name))
    error_message = "placement_group_name must be 1-255 letters, digits, '.', '_' or '-'."
  }
}

variable "redlock_password" {
  description = "Password of the ACL user \"redlock\" the lock clients use (at least 16 characters). Set it through TF_VAR_redlock_password; it lands in the state."
  type        = string
  sensitive   = true
  validation {
    condition     = length(var.redlock_password) >= 16
    error_message = "redlock_password must be at least 16 characters."
  }
}

variable "monitor_password" {
  description = "Password of the read-only ACL user \"monitor\" for `redlab doctor` and exporters (at least 16 characters)."
  type        = string
  sensitive   = true
  validation {
    condition     = length(var.monitor_password) >= 16
    error_message = "monitor_password must be at least 16 characters."
  }
}

variable "instance_type" {
  description = "EC2 instance type. Not burstable by default: a t-class instance out of CPU credits turns into latency spikes that look like node failures to Redlock."
  type        = string
  default     = "m6i.large"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*\\.[a-z0-9]+$", var.instance_type))
    error_message = "instance_type must look like m6i.large."
  }
}

variable "architecture" {
  description = "CPU architecture of the image: null follows instance_type (x86_64 when it supports it, else arm64); when set, instance_type must support it (checked at plan time). Used to pick the Debian 12 image when ami_id is null."
  type        = string
  default     = null
  validation {
    condition     = var.architecture == null ? true : contains(["x86_64", "arm64"], var.architecture)
    error_message = "architecture must be null, x86_64 or arm64."
  }
}

variable "ami_id" {
  description = "Image for the nodes; null picks the latest official Debian 12 image. The user data expects Debian 12 (redis-server 7.0, chrony 4.3, systemd, cloud-init)."
  type        = string
  default     = null
  validation {
    condition     = var.ami_id == null ? true : can(regex("^ami-[0-9a-f]+$", var.ami_id))
    error_message = "ami_id must be null or look like ami-0123abcd."
  }
}

variable "root_volume_size" {
  description = "Root volume size in GiB (the OS, packages and the journal; the append-only file has data_volume)."
  type        = number
  default     = 20
  validation {
    condition     = var.root_volume_size >= 8
    error_message = "root_volume_size must be at least 8 GiB."
  }
}

variable "kms_key_id" {
  description = "KMS key ARN for the encrypted root and data volumes; null uses the account's default EBS key."
  type        = string
  default     = null
}

variable "key_name" {
  description = "EC2 key pair for SSH, or null for none. It opens no port: ssh_ingress says who may reach SSH."
  type        = string
  default     = null
}

variable "ssh_ingress" {
  description = "Who may reach SSH (TCP 22) on the nodes, for drills and faults over SSH (redlab drill/fault/heal --hosts): cidrs, the control host's addresses, and security_group_ids, groups whose members (the control host) may connect. Both empty, the default: no SSH rule."
  type = object({
    cidrs              = optional(list(string), [])
    security_group_ids = optional(list(string), [])
  })
  default  = {}
  nullable = false
  validation {
    condition     = alltrue([for c in var.ssh_ingress.cidrs : can(cidrhost(c, 0))])
    error_message = "ssh_ingress.cidrs must be valid CIDR blocks (10.0.0.5/32)."
  }
  validation {
    condition     = length(setintersection(toset(var.ssh_ingress.cidrs), toset(["0.0.0.0/0", "::/0"]))) == 0
    error_message = "ssh_ingress.cidrs must not open SSH to the whole internet (0.0.0.0/0, ::/0): name the control host's addresses or its security group."
  }
  validation {
    condition     = alltrue([for s in var.ssh_ingress.security_group_ids : can(regex("^sg-[0-9a-f]+$", s))])
    error_message = "ssh_ingress.security_group_ids must look like sg-0123abcd."
  }
}

variable "ssh_user" {
  description = "Login user of the image, as the ssh_user output reports it for redlab hosts from-tofu: admin on Debian's AMIs; set it with ami_id when the image has another."
  type        = string
  default     = "admin"
  validation {
    condition     = can(regex("^[a-z_][a-z0-9_-]*$", var.ssh_user))
    error_message = "ssh_user must be a Unix user name (lower case letters, digits, _ and -)."
  }
}

variable "iam_instance_profile" {
  description = "Instance profile name (e.g. for SSM or CloudWatch agents), or null. With tls, leave it null: the module makes the nodes' profile, which may read the TLS parameters."
  type        = string
  default     = null
}

variable "tls" {
  description = <<-EOT
    TLS on the Redis port instead of plain TCP (null: plain, as deployments made before this input have it).
    parameter_path names an SSM Parameter Store path holding SecureStrings: <path>/ca.crt, and for node i
    (0-based) <path>/node-<i>.crt and <path>/node-<i>.key, PEM. Each node reads its own at every start of Redis
    with the instance profile the module makes (GetParameter on <path>/* and kms:Decrypt through SSM only);
    the user data names the path and holds nothing secret. kms_key_arn is the key the SecureStrings are
    encrypted with (null: the account's aws/ssm key).
  EOT
  type = object({
    parameter_path = string
    kms_key_arn    = optional(string)
  })
  default = null
  validation {
    condition     = var.tls == null ? true : can(regex("^(/[A-Za-z0-9_.-]+)+$", var.tls.parameter_path))
    error_message = "tls.parameter_path must be an SSM path such as /redlock/prod/tls: absolute, no trailing slash, letters, digits, _ . -."
  }
  validation {
    condition     = var.tls == null ? true : (var.tls.kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+$", var.tls.kms_key_arn)))
    error_message = "tls.kms_key_arn must be a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID), or null for aws/ssm."
  }
}

variable "additional_security_group_ids" {
  description = "Extra security groups for the nodes, e.g. operator access. They must not open the Redis port wider than client_cidrs."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for s in var.additional_security_group_ids : can(regex("^sg-[0-9a-f]+$", s))])
    error_message = "additional_security_group_ids must look like sg-0123abcd."
  }
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}

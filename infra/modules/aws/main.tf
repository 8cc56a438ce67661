# Five (node_count) independent Redis masters for Redlock: one EC2 instance per
# subnet, spread over availability zones and racks, no replication or cluster
# between them, configured entirely by the redis-node user data.

locals {
  # Never index past the subnets given; the instance precondition reports a
  # short list with a clear message instead of an index error.
  subnet_ids = slice(var.subnet_ids, 0, min(var.node_count, length(var.subnet_ids)))

  # Fixed addresses: redis.conf binds to the node's private address, which must
  # be known before the instance exists (see the README).
  private_ips = [for s in data.aws_subnet.this : cidrhost(s.cidr_block, var.private_ip_hostnum)]

  zones       = [for s in data.aws_subnet.this : s.availability_zone]
  nodes_by_az = { for az in distinct(local.zones) : az => length([for z in local.zones : z if z == az]) }
  # Losing one zone must leave a majority (quorum = node_count / 2 + 1), so a
  # zone may hold at most node_count - quorum = floor(node_count / 2) nodes.
  max_nodes_per_az = floor(var.node_count / 2)

  # The architecture follows the instance type unless given: an x86_64
  # image on a Graviton type would never boot.
  architecture = var.architecture != null ? var.architecture : (
    contains(data.aws_ec2_instance_type.this.supported_architectures, "x86_64") ? "x86_64" : "arm64"
  )
  ami_id = var.ami_id != null ? var.ami_id : data.aws_ami.debian[0].id

  # What EC2 receives: gzipped (cloud-init unpacks it), so that the
  # commented files stay far below the 16 KB EC2 accepts before base64.
  user_data       = [for m in module.redis_node : base64gzip(m.cloud_init)]
  user_data_bytes = [for u in local.user_data : length(u) / 4 * 3 - length(regexall("=", u))]

  # The by-id name udev gives an EBS volume on a Nitro instance: the volume
  # id without its dash. Known before the instance exists, unlike nvmeN.
  data_devices = [for v in aws_ebs_volume.data : "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_${replace(v.id, "-", "")}"]

  egress_rules = merge(
    { for c in var.egress_cidrs : "tcp-80-${c}" => { cidr = c, protocol = "tcp", port = 80 } },
    { for c in var.egress_cidrs : "tcp-443-${c}" => { cidr = c, protocol = "tcp", port = 443 } },
    { for c in var.egress_cidrs : "udp-123-${c}" => { cidr = c, protocol = "udp", port = 123 } },
  )

  tags = merge(var.tags, { "redlock:cluster" = var.name })

  # TLS (var.tls): where each node keeps its PEM files, and the script that
  # fetches them from SSM Parameter Store before every start of Redis.
  tls_dir = "/etc/redis/tls"
  tls_files = var.tls == null ? null : {
    cert_file = "${local.tls_dir}/node.crt"
    key_file  = "${local.tls_dir}/node.key"
    ca_file   = "${local.tls_dir}/ca.crt"
  }
  region = one(data.aws_region.current[*].name)
  tls_fetch_scripts = [for i in range(length(local.subnet_ids)) : var.tls == null ? null : templatefile("${path.module}/templates/tls-fetch.sh.tftpl", {
    tls_dir        = local.tls_dir
    region         = local.region
    parameter_path = var.tls.parameter_path
    index          = i
    cert_file      = local.tls_files.cert_file
    key_file       = local.tls_files.key_file
    ca_file        = local.tls_files.ca_file
  })]
  tls_parameter_arn = var.tls == null ? null : "arn:${one(data.aws_partition.current[*].partition)}:ssm:${local.region}:${one(data.aws_caller_identity.current[*].account_id)}:parameter${var.tls.parameter_path}/*"
  tls_kms_key_arn   = var.tls == null ? null : coalesce(var.tls.kms_key_arn, try(data.aws_kms_alias.ssm[0].target_key_arn, null))
}

# Looked up only with tls: a deployment without it plans as before.
data "aws_region" "current" {
  count = var.tls == null ? 0 : 1
}

data "aws_partition" "current" {
  count = var.tls == null ? 0 : 1
}

data "aws_caller_identity" "current" {
  count = var.tls == null ? 0 : 1
}

# The key of SecureStrings encrypted without a key of their own.
data "aws_kms_alias" "ssm" {
  count = var.tls != null && try(var.tls.kms_key_arn, null) == null ? 1 : 0
  name  = "alias/aws/ssm"
}

data "aws_subnet" "this" {
  count = length(local.subnet_ids)
  id    = local.subnet_ids[count.index]

  lifecycle {
    postcondition {
      condition     = self.vpc_id == var.vpc_id
      error_message = "Every subnet in subnet_ids must belong to vpc_id (the security group is created there)."
    }
  }
}

data "aws_ec2_instance_type" "this" {
  instance_type = var.instance_type

  lifecycle {
    # The data volume is found by its NVMe id (see local.data_devices).
    postcondition {
      condition     = self.hypervisor == "nitro"
      error_message = "instance_type must be a Nitro instance type: the data volume is mounted by its NVMe device name."
    }
  }
}

data "aws_ami" "debian" {
  count       = var.ami_id == null ? 1 : 0
  most_recent = true
  owners      = ["136693071363"] # Debian's official AWS account

  filter {
    name   = "name"
    values = ["debian-12-${local.architecture == "arm64" ? "arm64" : "amd64"}-*"]
  }
  filter {
    name   = "architecture"
    values = [local.architecture]
  }
  filter {
    name   = "virtualization-type"
    values = ["hvm"]
  }
}

# Every file the node boots with; the same module renders the local lab's nodes.
module "redis_node" {
  source = "../redis-node"
  count  = length(local.subnet_ids)

  bind_address      = local.private_ips[count.index]
  port              = var.redis_port
  max_lock_ttl      = var.max_lock_ttl
  restart_margin    = var.restart_margin
  maxmemory         = var.maxmemory
  fsync             = "always"
  persistence       = true
  data_device       = local.data_devices[count.index]
  client_cidrs      = var.client_cidrs
  ntp_servers       = var.ntp_servers
  ntp_poll_exponent = var.ntp_poll_exponent
  acl_enabled       = true
  redlock_password  = var.redlock_password
  monitor_password  = var.monitor_password
  tls               = local.tls_files
  tls_fetch_script  = local.tls_fetch_scripts[count.index]
  extra_packages    = var.tls == null ? [] : ["awscli"]
}

# Rolling changes: everything that replaces an instance (its user data, its
# image, its type) reaches a node only when that node's generation changes,
# so that no change, however small, replaces every node in one apply. Raise
# one node's entry in node_generations per apply (README: Change and roll).
# A node whose data volume was replaced gets the new definition too: its
# user data names the volume.
module "generations" {
  source = "../node-generations"

  definitions = {
    for i in range(length(local.subnet_ids)) : tostring(i) => {
      user_data     = local.user_data[i]
      ami           = local.ami_id
      instance_type = var.instance_type
    }
  }
  generations = {
    for i in range(length(local.subnet_ids)) : tostring(i) => "${lookup(var.node_generations, tostring(i), 0)}/${aws_ebs_volume.data[i].id}"
  }
}

resource "aws_security_group" "this" {
  name_prefix = "${var.name}-"
  description = "Redlock Redis nodes: the Redis port from the client CIDRs only"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = var.name })

  lifecycle {
    create_before_destroy = true
  }
}

# Redis from the clients, the only ingress besides SSH when ssh_ingress asks
# for it. The nodes never talk to each other.
resource "aws_vpc_security_group_ingress_rule" "redis" {
  for_each = toset(var.client_cidrs)

  security_group_id = aws_security_group.this.id
  description       = "Redis from lock clients"
  ip_protocol       = "tcp"
  from_port         = var.redis_port
  to_port           = var.redis_port
  cidr_ipv4         = strcontains(each.value, ":") ? null : each.value
  cidr_ipv6         = strcontains(each.value, ":") ? each.value : null
  tags              = local.tags
}

# SSH for drills and faults over SSH, from what ssh_ingress names only: the
# control host's addresses or its security groups.
resource "aws_vpc_security_group_ingress_rule" "ssh" {
  for_each = merge(
    { for c in var.ssh_ingress.cidrs : c => { ipv4 = strcontains(c, ":") ? null : c, ipv6 = strcontains(c, ":") ? c : null, group = null } },
    { for g in var.ssh_ingress.security_group_ids : g => { ipv4 = null, ipv6 = null, group = g } },
  )

  security_group_id            = aws_security_group.this.id
  description                  = "SSH from the drill control host"
  ip_protocol                  = "tcp"
  from_port                    = 22
  to_port                      = 22
  cidr_ipv4                    = each.value.ipv4
  cidr_ipv6                    = each.value.ipv6
  referenced_security_group_id = each.value.group
  tags                         = local.tags
}

resource "aws_vpc_security_group_egress_rule" "this" {
  for_each = local.egress_rules

  security_group_id = aws_security_group.this.id
  description       = "${upper(each.value.protocol)} ${each.value.port} for packages and time"
  ip_protocol       = each.value.protocol
  from_port         = each.value.port
  to_port           = each.value.port
  cidr_ipv4         = strcontains(each.value.cidr, ":") ? null : each.value.cidr
  cidr_ipv6         = strcontains(each.value.cidr, ":") ? each.value.cidr : null
  tags              = local.tags
}

# Distinct hardware (racks) inside each zone as well. Placement group names
# are unique per region: without placement_group_name, a suffix drawn once
# per state keeps two deployments of the same name apart (staging and
# production in one region).
resource "terraform_data" "placement_group_suffix" {}

resource "aws_placement_group" "this" {
  name     = coalesce(var.placement_group_name, "${var.name}-spread-${substr(terraform_data.placement_group_suffix.id, 0, 8)}")
  strategy = "spread"
  tags     = local.tags
}

# The append-only file's own volume: the root volume also takes the OS's and
# the journal's writes, and its IOPS are shared with them. It outlives the
# instance: a replaced node finds its append-only file again (and still
# waits out the restart delay after its first boot).
resource "aws_ebs_volume" "data" {
  count = length(local.subnet_ids)

  availability_zone = local.zones[count.index]
  size              = var.data_volume.size
  type              = var.data_volume.type
  iops              = var.data_volume.iops
  throughput        = var.data_volume.throughput
  encrypted         = true
  kms_key_id        = var.kms_key_id

  tags = merge(local.tags, {
    Name           = "${var.name}-${count.index}-data"
    "redlock:node" = tostring(count.index)
  })
}

resource "aws_volume_attachment" "data" {
  count = length(local.subnet_ids)

  device_name = "/dev/sdf"
  volume_id   = aws_ebs_volume.data[count.index].id
  instance_id = aws_instance.this[count.index].id
  # Detached from a stopped instance only (a replaced node is stopped first,
  # Redis shutting down cleanly), never from under a running Redis.
  stop_instance_before_detaching = true
}

resource "aws_instance" "this" {
  count = length(local.subnet_ids)

  ami                         = nonsensitive(module.generations.definitions[tostring(count.index)].ami)
  instance_type               = nonsensitive(module.generations.definitions[tostring(count.index)].instance_type)
  subnet_id                   = local.subnet_ids[count.index]
  private_ip                  = local.private_ips[count.index]
  associate_public_ip_address = false
  vpc_security_group_ids      = concat([aws_security_group.this.id], var.additional_security_group_ids)
  placement_group             = aws_placement_group.this.name
  key_name                    = var.key_name
  iam_instance_profile        = var.tls == null ? var.iam_instance_profile : aws_iam_instance_profile.tls[0].name
  ebs_optimized               = true

  user_data_base64            = module.generations.definitions[tostring(count.index)].user_data
  user_data_replace_on_change = true

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
    instance_metadata_tags      = "disabled"
  }

  root_block_device {
    encrypted             = true
    kms_key_id            = var.kms_key_id
    volume_type           = "gp3"
    volume_size           = var.root_volume_size
    delete_on_termination = true
  }

  tags = merge(local.tags, {
    Name           = "${var.name}-${count.index}"
    "redlock:node" = tostring(count.index)
  })

  lifecycle {
    precondition {
      condition     = length(var.subnet_ids) >= var.node_count
      error_message = "subnet_ids must give one subnet per node (node_count)."
    }
    precondition {
      condition     = max(values(local.nodes_by_az)...) <= local.max_nodes_per_az
      error_message = "Too many nodes share an availability zone: losing that zone would take the majority with it. Spread subnet_ids over more zones."
    }
    precondition {
      condition     = contains(data.aws_ec2_instance_type.this.supported_architectures, local.architecture)
      error_message = "architecture does not match instance_type: the image would not boot. Leave architecture null to follow the instance type."
    }
    precondition {
      condition     = var.tls == null || var.iam_instance_profile == null
      error_message = "With tls, leave iam_instance_profile null: the module makes the nodes' instance profile, which may read the TLS parameters."
    }
    precondition {
      condition     = local.user_data_bytes[count.index] <= 16384
      error_message = "The node's user data exceeds the 16384 bytes EC2 accepts (after gzip)."
    }
  }
}

# With tls: the nodes' own role, allowed to read the TLS parameters under
# tls.parameter_path and to decrypt them through SSM, nothing else.
data "aws_iam_policy_document" "tls_assume" {
  count = var.tls == null ? 0 : 1

  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "tls_read" {
  count = var.tls == null ? 0 : 1

  statement {
    sid       = "ReadTLSParameters"
    actions   = ["ssm:GetParameter"]
    resources = [local.tls_parameter_arn]
  }
  statement {
    sid       = "DecryptTLSParameters"
    actions   = ["kms:Decrypt"]
    resources = [local.tls_kms_key_arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["ssm.${local.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "tls" {
  count = var.tls == null ? 0 : 1

  name_prefix        = "${var.name}-node-"
  description        = "Redlock nodes: read their TLS certificates from SSM Parameter Store"
  assume_role_policy = data.aws_iam_policy_document.tls_assume[0].json
  tags               = local.tags
}

resource "aws_iam_role_policy" "tls" {
  count = var.tls == null ? 0 : 1

  name   = "read-tls-parameters"
  role   = aws_iam_role.tls[0].id
  policy = data.aws_iam_policy_document.tls_read[0].json
}

resource "aws_iam_instance_profile" "tls" {
  count = var.tls == null ? 0 : 1

  name_prefix = "${var.name}-node-"
  role        = aws_iam_role.tls[0].name
  tags        = local.tags
}

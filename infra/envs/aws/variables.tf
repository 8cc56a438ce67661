variable "region" {
  description = "AWS region; pick one with at least three availability zones."
  type        = string
}

variable "name" {
  description = "Name prefix of the resources."
  type        = string
  default     = "redlock"
}

variable "vpc_id" {
  description = "Existing VPC for the nodes."
  type        = string
}

variable "subnet_ids" {
  description = "Five private subnets, one per node, spread over at least three availability zones."
  type        = list(string)
}

variable "client_cidrs" {
  description = "CIDR blocks of the lock clients and the monitoring host."
  type        = list(string)
}

variable "max_lock_ttl" {
  description = "Longest lock TTL the clients use, in seconds."
  type        = number
  default     = 30
}

variable "restart_margin" {
  description = "Seconds added to max_lock_ttl before a crashed or rebooted node serves again."
  type        = number
  default     = 2
}

variable "instance_type" {
  description = "EC2 instance type of the nodes."
  type        = string
  default     = "m6i.large"
}

variable "data_volume" {
  description = "Each node's EBS volume for the append-only file: size (GiB), type (gp3, io1, io2), iops, throughput (MiB/s, gp3). See modules/aws."
  type = object({
    size       = optional(number, 10)
    type       = optional(string, "gp3")
    iops       = optional(number)
    throughput = optional(number)
  })
  default = {}
}

variable "node_generations" {
  description = "Generation of each node by index (\"0\" to \"4\"). Raise one node's entry per apply to hand it the current configuration (README: Change and roll)."
  type        = map(number)
  default     = {}
}

variable "placement_group_name" {
  description = "Name of the spread placement group; null makes one unique to this state. A deployment made before this variable existed keeps its group with \"<name>-spread\"."
  type        = string
  default     = null
}

variable "key_name" {
  description = "EC2 key pair for SSH (drills and faults over SSH), or null. It opens no port: see ssh_ingress."
  type        = string
  default     = null
}

variable "ssh_ingress" {
  description = "Who may reach SSH (TCP 22) on the nodes: cidrs (the drill control host's addresses, e.g. 10.0.0.5/32) and/or security_group_ids (the control host's group). Empty: no SSH. Validated by modules/aws."
  type = object({
    cidrs              = optional(list(string), [])
    security_group_ids = optional(list(string), [])
  })
  default  = {}
  nullable = false
}

variable "redlock_password" {
  description = "Password of the ACL user \"redlock\" (set TF_VAR_redlock_password)."
  type        = string
  sensitive   = true
}

variable "monitor_password" {
  description = "Password of the ACL user \"monitor\" (set TF_VAR_monitor_password)."
  type        = string
  sensitive   = true
}

variable "tls" {
  description = "TLS on the Redis port (null: plain TCP). parameter_path: the SSM path of the SecureStrings ca.crt, node-<i>.crt and node-<i>.key; kms_key_arn: their key (null: aws/ssm). See ../../modules/aws and ../../README.md."
  type = object({
    parameter_path = string
    kms_key_arn    = optional(string)
  })
  default = null
}

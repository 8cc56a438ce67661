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

variable "key_name" {
  description = "EC2 key pair for SSH, or null."
  type        = string
  default     = null
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

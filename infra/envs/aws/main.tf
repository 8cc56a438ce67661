# Example root module: five Redlock nodes in an existing VPC.
# See README.md for prerequisites, apply and destroy.

provider "aws" {
  region = var.region

  default_tags {
    tags = {
      Project   = "redlock-lab"
      ManagedBy = "terraform"
    }
  }
}

module "redlock" {
  source = "../../modules/aws"

  name             = var.name
  node_count       = 5
  vpc_id           = var.vpc_id
  subnet_ids       = var.subnet_ids
  client_cidrs     = var.client_cidrs
  max_lock_ttl     = var.max_lock_ttl
  restart_margin   = var.restart_margin
  instance_type    = var.instance_type
  data_volume      = var.data_volume
  node_generations = var.node_generations

  placement_group_name = var.placement_group_name
  redlock_password     = var.redlock_password
  monitor_password     = var.monitor_password
  key_name             = var.key_name
  ssh_ingress          = var.ssh_ingress
  tls                  = var.tls
}

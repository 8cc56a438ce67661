terraform {
  required_version = ">= 1.6.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
  }

  # Keep the state somewhere shared and locked for real use, e.g.:
  # backend "s3" {
  #   bucket       = "my-terraform-state"
  #   key          = "redlock/terraform.tfstate"
  #   region       = "eu-central-1"
  #   use_lockfile = true
  # }
}

terraform {
  # No provider to download: terraform_data and local-exec are built in
  # (terraform_data needs Terraform 1.4+; OpenTofu 1.6+ has it too).
  required_version = ">= 1.6.0"
}

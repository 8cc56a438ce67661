terraform {
  # No provider: terraform_data is built in, so the module plans, applies and
  # runs its tests without a registry. OpenTofu 1.6+ works the same.
  required_version = ">= 1.6.0"
}

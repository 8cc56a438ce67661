terraform {
  # No provider: every file is rendered with templatefile, so the module plans,
  # applies and runs its tests without reaching a registry. 1.6 brings the test
  # framework; OpenTofu 1.6+ works the same.
  required_version = ">= 1.6.0"
}

// Package verify checks the infrastructure code under infra/ with the real
// programs: its tests render infra/modules/redis-node with tofu or terraform
// and hand every rendered file to the program that reads it on a node
// (redis-server, chronyd, systemd-analyze, systemd-fstab-generator,
// cloud-init, bash), boot the rendered user data in Debian 12 machines under
// systemd (infra/machine) and drive the units, run the restart guard, prove
// that removing a rule from a template fails the module's tests, and parse
// infra/modules/aws, which cannot be initialised without a provider
// registry, evaluating its checks and breaking them in copies, and checking
// it and infra/envs/aws against the aws provider's schema as the npm package
// @cdktf/provider-aws carries it.
//
// The package has no non-test code; it exists for its tests. The Terraform
// binary is $REDLAB_TF, else tofu, else terraform on PATH; without one, or
// without root and systemd-nspawn for the machines, the tests fail under
// CI=true and are skipped, loudly, otherwise.
package verify

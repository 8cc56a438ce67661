package verify

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAWSRuleRemovalFailsStaticChecks removes or weakens one rule of
// modules/aws at a time, in a copy of infra/, and runs the static check that
// guards it (this test binary, on the copy) expecting it to fail: every rule
// the AWS module adds is really checked, even without a provider registry.
func TestAWSRuleRemovalFailsStaticChecks(t *testing.T) {
	if os.Getenv(moduleDirEnv) != "" {
		t.Skip("running on a mutated copy already")
	}
	mutations := []struct {
		name      string
		file      string // under infra/modules
		from, to  string
		test      string // the check that must fail
		wantError string // a phrase of its message
	}{
		{"user data not replaced on change", "aws/main.tf", "user_data_replace_on_change = true", "user_data_replace_on_change = false",
			"TestAWSModuleInstances", "user_data_replace_on_change = true"},
		{"image not rolled", "aws/main.tf", "ami                         = nonsensitive(module.generations.definitions[tostring(count.index)].ami)", "ami                         = local.ami_id",
			"TestAWSModuleInstances", "ami must be module.generations.definitions"},
		{"changes ignored instead of rolled", "aws/main.tf", "    precondition {\n      condition     = length(var.subnet_ids) >= var.node_count", "    ignore_changes = [user_data_base64]\n    precondition {\n      condition     = length(var.subnet_ids) >= var.node_count",
			"TestAWSModuleInstances", "ignores changes"},
		{"generations ignore the data volume", "aws/main.tf", "\"${lookup(var.node_generations, tostring(i), 0)}/${aws_ebs_volume.data[i].id}\"", "tostring(lookup(var.node_generations, tostring(i), 0))",
			"TestAWSModuleInstances", "each node's data volume"},
		{"data volume detached from a running node", "aws/main.tf", "stop_instance_before_detaching = true", "stop_instance_before_detaching = false",
			"TestAWSModuleInstances", "must stop the instance before detaching"},
		{"data volume unencrypted", "aws/main.tf", "  encrypted         = true\n  kms_key_id        = var.kms_key_id\n\n  tags", "  encrypted         = false\n  kms_key_id        = var.kms_key_id\n\n  tags",
			"TestAWSModuleInstances", "aws_ebs_volume.data must be encrypted"},
		{"data volume not mounted", "aws/main.tf", "  data_device       = local.data_devices[count.index]\n", "",
			"TestAWSModuleInstances", "must mount the data volume"},
		{"fixed placement group name", "aws/main.tf", `coalesce(var.placement_group_name, "${var.name}-spread-${substr(terraform_data.placement_group_suffix.id, 0, 8)}")`, `"${var.name}-spread"`,
			"TestAWSModuleInstances", "unique to the state"},
		{"subnets of any VPC", "aws/main.tf", "condition     = self.vpc_id == var.vpc_id", "condition     = true",
			"TestAWSModulePlanChecks", "a subnet of another VPC"},
		{"any hypervisor", "aws/main.tf", `condition     = self.hypervisor == "nitro"`, "condition     = true",
			"TestAWSModulePlanChecks", "a Xen instance type"},
		{"architecture unchecked", "aws/main.tf", "condition     = contains(data.aws_ec2_instance_type.this.supported_architectures, local.architecture)", "condition     = true",
			"TestAWSModulePlanChecks", "x86_64 image on a Graviton type"},
		{"user data size unchecked", "aws/main.tf", "condition     = local.user_data_bytes[count.index] <= 16384", "condition     = true",
			"TestAWSModulePlanChecks", "user data over 16 KB"},
		{"TLS parameters readable account-wide", "aws/main.tf", "resources = [local.tls_parameter_arn]", `resources = ["*"]`,
			"TestAWSModuleTLS", "ssm:GetParameter on"},
		{"decrypt with any service", "aws/main.tf", "      variable = \"kms:ViaService\"", "      variable = \"aws:SourceVpc\"",
			"TestAWSModuleTLS", "limited to calls through SSM"},
		{"tls with a profile that cannot read the parameters", "aws/main.tf", "condition     = var.tls == null || var.iam_instance_profile == null", "condition     = true",
			"TestAWSModulePlanChecks", "tls with a profile of one's own"},
		{"TLS node files not from redis-node's profile", "aws/main.tf", "  tls               = local.tls_files\n", "",
			"TestAWSModuleTLS", "must come from local.tls_files"},
		{"gp3 throughput unchecked", "aws/variables.tf", "var.data_volume.throughput == null ? true : var.data_volume.type == \"gp3\" && ", "var.data_volume.throughput == null ? true : ",
			"TestAWSModuleVariables", "variable data_volume"},
	}

	// The mutated copies are checked by this test binary, run again.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			infra := filepath.Join(t.TempDir(), "infra")
			copyTree(t, filepath.Join(src, "modules"), filepath.Join(infra, "modules"))
			copyTree(t, filepath.Join(src, "envs", "aws"), filepath.Join(infra, "envs", "aws"))
			path := filepath.Join(infra, "modules", m.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(data), m.from); n != 1 {
				t.Fatalf("%s contains %q %d times, want 1", m.file, m.from, n)
			}
			if err := os.WriteFile(path, []byte(strings.Replace(string(data), m.from, m.to, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, self, "-test.run", "^"+m.test+"$", "-test.count=1")
			cmd.Dir = src + "/verify"
			cmd.Env = append(os.Environ(), moduleDirEnv+"="+filepath.Join(infra, "modules"))
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("%s passed with %q replaced by %q in %s, want a failure:\n%s", m.test, m.from, m.to, m.file, out)
			}
			if !strings.Contains(string(out), m.wantError) {
				t.Fatalf("%s failed, but not on %q:\n%s", m.test, m.wantError, out)
			}
		})
	}
}

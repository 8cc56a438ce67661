package plan

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// terraformBinary is the tofu or terraform the lab uses.
func terraformBinary(t *testing.T) string {
	t.Helper()
	bin, err := lab.FindTerraform("../..")
	if err != nil {
		testenv.Missing(t, "tofu or terraform: "+err.Error())
	}
	return bin
}

// TestCheckTFVars runs the real terraform on the plan's tfvars for a lab
// plan and for a plan whose fsyncs need a provisioned volume, and on three
// wrong files, which it must refuse: a name envs/aws does not declare, a
// value of the wrong type, a value a validation block of modules/aws
// refuses.
func TestCheckTFVars(t *testing.T) {
	tf := terraformBinary(t)
	infra := filepath.Join("..", "..", "infra")
	p := &Plan{Site: "lab", Target: TargetRecord{Rate: 300, SLO: []string{"acquire.p99<10ms"}}}
	big := labFacts()
	big.Rate = 5000
	for _, tc := range []struct {
		name    string
		vars    []TFVar
		wantErr string
	}{
		{"the lab's plan", tfvars(Recommend(labFacts()), labFacts()), ""},
		{"a provisioned data volume", tfvars(Recommend(big), big), ""},
		{"an undeclared name", []TFVar{{Name: "max_lock_ttl", Value: "14"}, {Name: "lock_ttl", Value: "14"}}, "sets lock_ttl, which envs/aws does not declare"},
		{"a wrong type", []TFVar{{Name: "max_lock_ttl", Value: `"fourteen"`}}, "max_lock_ttl"},
		{"a value modules/aws refuses", []TFVar{{Name: "max_lock_ttl", Value: "0"}}, "max_lock_ttl must be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), TFVarsFile)
			if err := os.WriteFile(path, []byte(tfvarsText(tc.vars, p)), 0o644); err != nil {
				t.Fatal(err)
			}
			said, err := CheckTFVars(context.Background(), tf, infra, path)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("got %v, want the tfvars accepted", err)
			case tc.wantErr == "" && !strings.Contains(said, "accepted"):
				t.Errorf("got %q, want it to say the tfvars were accepted", said)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

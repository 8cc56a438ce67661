package drill

import (
	"os"
	"testing"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// requireLab returns the lab configuration a real drill needs
// (testenv.RequireLab: the redlab binary and tofu/terraform).
func requireLab(t *testing.T) lab.Config {
	t.Helper()
	bin, tf := testenv.RequireLab(t, lab.FindTerraform)
	return lab.Config{Redlab: bin, Terraform: tf, InfraDir: "../infra"}
}

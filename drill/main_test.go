package drill

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// The redlab binary the lab's provisioners exec (the test binary cannot
// stand in for it), built once per test run, only when a test needs it.
var (
	binDir    string
	buildOnce sync.Once
	redlabBin string
	buildErr  error
)

func TestMain(m *testing.M) {
	var err error
	binDir, err = os.MkdirTemp("", "redlab-drill-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}

// requireLab returns the lab configuration a real drill needs: the redlab
// binary and tofu/terraform. Without redis-server or tofu/terraform the test
// ends by testenv.Missing: a failure under CI=true, a loud skip otherwise.
func requireLab(t *testing.T) lab.Config {
	t.Helper()
	testenv.Require(t, "redis-server")
	tf, err := lab.FindTerraform("..")
	if err != nil {
		testenv.Missing(t, err.Error())
	}
	return lab.Config{Redlab: redlab(t), Terraform: tf, InfraDir: "../infra"}
}

// redlab returns the redlab binary, built once per test run.
func redlab(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		redlabBin = filepath.Join(binDir, "redlab")
		out, err := exec.Command("go", "build", "-o", redlabBin, "github.com/redlocklab/redlocklab/cmd/redlab").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/redlab: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return redlabBin
}

package lab

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/redlocklab/redlocklab/infra/node"
)

func TestCredentialsVarFile(t *testing.T) {
	c, err := node.NewCredentials()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), credsVarFile)
	remove, err := writeCredentialsVarFile(c, path)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got["redlock_password"] != c.Redlock.Password || got["monitor_password"] != c.Monitor.Password || got["admin_password"] != c.Admin.Password || len(got) != 3 {
		t.Errorf("var file: got %v, want the three passwords under the root module's variable names", got)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("var file mode %v, want 0600", fi.Mode().Perm())
	}
	remove()
	if fileExists(path) {
		t.Error("var file still there after remove")
	}
}

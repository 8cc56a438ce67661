package lab

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/atomicfile"
)

// CredentialsEnv is the environment variable through which commands run
// against the lab find its credentials file (node.CredentialsFile in the
// state directory; its path).
const CredentialsEnv = "REDLAB_CREDENTIALS"

// CredentialsPath is the lab's credentials file.
func (l *Lab) CredentialsPath() string { return filepath.Join(l.stateDir, node.CredentialsFile) }

// Credentials reads the lab's credentials file.
func (l *Lab) Credentials() (Credentials, error) { return node.ReadCredentials(l.CredentialsPath()) }

// credentialsTFVars are the credentials as the root module's sensitive variables.
func credentialsTFVars(c Credentials) map[string]string {
	return map[string]string{
		"redlock_password": c.Redlock.Password,
		"monitor_password": c.Monitor.Password,
		"admin_password":   c.Admin.Password,
	}
}

// writeCredentialsVarFile writes the credentials as a Terraform var file (mode 0600)
// and returns a function that removes it.
func writeCredentialsVarFile(c Credentials, path string) (remove func(), err error) {
	b, err := json.Marshal(credentialsTFVars(c))
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	return func() { os.Remove(path) }, nil
}

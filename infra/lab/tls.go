package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redlocklab/redlocklab/internal/tlscert"
)

// TLSDir is where a TLS lab keeps its CA and node certificate, under the
// state directory: ca.crt, node.crt and node.key (mode 0600), the files
// the nodes' redis.conf names.
const TLSDir = "tls"

// tlsValidity is how long the lab's certificates are valid: long enough
// that `redlab doctor` has no expiry to warn about in a lab's life.
const tlsValidity = 365 * 24 * time.Hour

// ensureTLS writes the lab's CA and node certificate unless they exist.
// They are kept across `lab up`: the running nodes hold the certificate
// they started with, and a new CA would make every client's handshake fail
// until each node restarted. One certificate serves every process node: all
// listen on loopback (tlscert.LabHosts).
func ensureTLS(stateDir string) error {
	dir := filepath.Join(stateDir, TLSDir)
	have := 0
	for _, f := range []string{tlscert.CAFile, tlscert.CertFile, tlscert.KeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			have++
		}
	}
	if have == 3 {
		return nil
	}
	if _, err := tlscert.Write(dir, tlscert.LabHosts, tlsValidity); err != nil {
		return fmt.Errorf("lab: tls: %w", err)
	}
	return nil
}

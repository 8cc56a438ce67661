package tlscert_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/tlscert"
)

func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	hosts := append(append([]string(nil), tlscert.LabHosts...), "127.80.1.2")
	f, err := tlscert.Write(dir, hosts, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]os.FileMode{f.CA: 0o644, f.Cert: 0o644, f.Key: 0o600, dir: 0o700} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != mode {
			t.Errorf("%s: mode %o, want %o", path, got, mode)
		}
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatalf("certificate and key do not match: %v", err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(caPEM)
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*x509.Certificate{leaf, ca} {
		if k, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
			t.Errorf("%s: key %T, want ECDSA P-256", c.Subject.CommonName, c.PublicKey)
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, h := range append(hosts, "127.0.0.2", "example.com") {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: h, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		want := !strings.HasPrefix(h, "127.0.0.2") && h != "example.com"
		if (err == nil) != want {
			t.Errorf("verify for %s: %v, want valid %v", h, err, want)
		}
	}
	if left := time.Until(leaf.NotAfter); left < 23*time.Hour || left > 25*time.Hour {
		t.Errorf("certificate valid for %v more, want about 24h", left)
	}
}

func TestIssueNeedsHost(t *testing.T) {
	ca, err := tlscert.NewCA("x", time.Now(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Issue(nil, time.Now(), time.Now().Add(time.Hour)); err == nil || !strings.Contains(err.Error(), "at least one host") {
		t.Errorf("got %v, want an error about the missing host", err)
	}
}

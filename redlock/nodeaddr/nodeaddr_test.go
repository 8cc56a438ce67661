package nodeaddr_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    nodeaddr.List
		wantErr string
	}{
		{in: "10.0.0.1:6379, 10.0.0.2:6379", want: nodeaddr.List{Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379"}}},
		{in: "rediss://a:6380,rediss://[::1]:6380", want: nodeaddr.List{Addrs: []string{"a:6380", "[::1]:6380"}, TLS: true}},
		{in: "rediss://a:6380,b:6379", wantErr: "mixes TLS (rediss://a:6380) and plain (b:6379) nodes"},
		{in: "b:6379,rediss://a:6380", wantErr: "mixes TLS (rediss://a:6380) and plain (b:6379) nodes"},
		{in: "redis://a:6379", wantErr: `node "redis://a:6379": scheme redis:// is not supported`},
		{in: "rediss://a:6380,rediss://a:6380", wantErr: `node "a:6380" listed twice`},
		{in: "a", wantErr: "want host:port or rediss://host:port"},
		{in: ":6379", wantErr: "empty host"},
		{in: "a:0", wantErr: "port must be 1-65535"},
		{in: " , ", wantErr: "no nodes in"},
	} {
		got, err := nodeaddr.Parse(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q): got %v, want an error containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		if again, err := nodeaddr.Parse(got.String()); err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("Parse(%q.String() = %q) = %+v, %v; want the same list back", tc.in, got.String(), again, err)
		}
	}
}

// selfSigned writes a self-signed certificate and its key into dir: the
// certificate is its own CA. TLSConfig only loads files; what a handshake
// makes of them is tested where nodes run.
func selfSigned(t *testing.T, dir string) nodeaddr.TLSFiles {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nodeaddr test"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := nodeaddr.TLSFiles{CA: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	f.Cert = f.CA
	for path, block := range map[string]*pem.Block{f.CA: {Type: "CERTIFICATE", Bytes: der}, f.Key: {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	files := selfSigned(t, dir)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	plain := nodeaddr.List{Addrs: []string{"a:1"}}
	secure := nodeaddr.List{Addrs: []string{"a:1"}, TLS: true}
	for _, tc := range []struct {
		name    string
		l       nodeaddr.List
		f       nodeaddr.TLSFiles
		wantErr string
		wantTLS bool
	}{
		{name: "plain", l: plain},
		{name: "plain with a CA", l: plain, f: nodeaddr.TLSFiles{CA: files.CA}, wantErr: "TLS settings given for plain nodes"},
		{name: "TLS, system roots", l: secure, wantTLS: true},
		{name: "TLS with CA and client certificate", l: secure, f: nodeaddr.TLSFiles{CA: files.CA, Cert: files.Cert, Key: files.Key}, wantTLS: true},
		{name: "CA file without PEM", l: secure, f: nodeaddr.TLSFiles{CA: notPEM}, wantErr: "holds no PEM certificate"},
		{name: "missing CA file", l: secure, f: nodeaddr.TLSFiles{CA: filepath.Join(dir, "nope")}, wantErr: "no such file"},
		{name: "certificate without key", l: secure, f: nodeaddr.TLSFiles{Cert: files.Cert}, wantErr: "needs both the certificate and its key"},
		{name: "key that is not the certificate's", l: secure, f: nodeaddr.TLSFiles{Cert: files.Cert, Key: files.CA}, wantErr: "client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.l.TLSConfig(tc.f)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (cfg != nil) != tc.wantTLS {
				t.Fatalf("got config %v, want TLS %v", cfg, tc.wantTLS)
			}
			if cfg != nil && (cfg.MinVersion == 0 || (tc.f.CA != "") != (cfg.RootCAs != nil) || (tc.f.Cert != "") != (len(cfg.Certificates) == 1)) {
				t.Errorf("config %+v does not reflect %+v", cfg, tc.f)
			}
		})
	}
}

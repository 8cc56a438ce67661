// Package tlscert issues the certificates of a TLS lab: a CA and node
// certificates signed by it, ECDSA P-256, with subject alternative names for
// the nodes' addresses. The lab writes them into its state directory at
// `redlab lab up --tls`; tests issue broken ones (expired, for another name,
// from another CA) to check what clients say about them.
//
// Keys are written mode 0600, certificates 0644. Nothing here is meant for
// production: a real deployment's certificates come from its own CA.
package tlscert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/internal/atomicfile"
)

// File names Write uses inside its directory.
const (
	CAFile   = "ca.crt"
	CertFile = "node.crt"
	KeyFile  = "node.key"
)

// LabHosts are the names every lab node certificate carries: loopback by
// address and by name. The lab's machines (127.80.x.y) add their own.
var LabHosts = []string{"127.0.0.1", "::1", "localhost"}

// CA is a certificate authority held in memory.
type CA struct {
	Cert *x509.Certificate
	// PEM is Cert, PEM-encoded.
	PEM []byte
	key *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA named name, valid from notBefore to notAfter.
func NewCA(name string, notBefore, notAfter time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlscert: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("tlscert: CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tlscert: CA: %w", err)
	}
	return &CA{Cert: cert, PEM: pemOf("CERTIFICATE", der), key: key}, nil
}

// Pair is an issued certificate with its private key, both PEM-encoded.
type Pair struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Issue signs a server (and client) certificate for hosts, each an IP
// address or a DNS name, valid from notBefore to notAfter. The first host
// is also the subject's common name.
func (ca *CA) Issue(hosts []string, notBefore, notAfter time.Time) (Pair, error) {
	if len(hosts) == 0 {
		return Pair{}, errors.New("tlscert: a certificate needs at least one host")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("tlscert: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("tlscert: certificate for %s: %w", strings.Join(hosts, ", "), err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return Pair{}, fmt.Errorf("tlscert: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("tlscert: %w", err)
	}
	return Pair{Cert: cert, CertPEM: pemOf("CERTIFICATE", der), KeyPEM: pemOf("PRIVATE KEY", keyDER)}, nil
}

// Files are the paths Write wrote.
type Files struct {
	CA, Cert, Key string
}

// Write makes a CA and one node certificate for hosts (see LabHosts), both
// valid from an hour ago for validity, and writes them into dir (created
// 0700 if needed) as CAFile, CertFile and KeyFile. The CA's key is not
// kept: a lab that needs new certificates writes a new CA.
func Write(dir string, hosts []string, validity time.Duration) (Files, error) {
	now := time.Now()
	ca, err := NewCA("redlab lab CA", now.Add(-time.Hour), now.Add(validity))
	if err != nil {
		return Files{}, err
	}
	pair, err := ca.Issue(hosts, now.Add(-time.Hour), now.Add(validity))
	if err != nil {
		return Files{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, fmt.Errorf("tlscert: %w", err)
	}
	f := Files{CA: filepath.Join(dir, CAFile), Cert: filepath.Join(dir, CertFile), Key: filepath.Join(dir, KeyFile)}
	if err := WritePair(f, ca, pair); err != nil {
		return Files{}, err
	}
	return f, nil
}

// WritePair writes ca's certificate and pair to the paths of f: the key
// mode 0600, the certificates 0644. Each file is replaced whole (a
// temporary file, created 0600, renamed over it), so a key file never
// keeps an older, wider mode.
func WritePair(f Files, ca *CA, pair Pair) error {
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{f.CA, ca.PEM, 0o644}, {f.Cert, pair.CertPEM, 0o644}, {f.Key, pair.KeyPEM, 0o600}} {
		if err := atomicfile.WriteFile(w.path, w.data, w.mode); err != nil {
			return fmt.Errorf("tlscert: %w", err)
		}
	}
	return nil
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// serial is a random 128-bit serial number, as RFC 5280 recommends.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

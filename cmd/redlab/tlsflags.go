package main

import (
	"crypto/tls"
	"os"

	"github.com/spf13/pflag"

	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
)

// The environment of the TLS flags: `redlab lab up --tls` exports
// REDLAB_TLS_CA beside rediss:// nodes.
const (
	envTLSCA         = "REDLAB_TLS_CA"
	envTLSCert       = "REDLAB_TLS_CERT"
	envTLSKey        = "REDLAB_TLS_KEY"
	envTLSServerName = "REDLAB_TLS_SERVER_NAME"
)

// tlsFlags are --tls-ca, --tls-cert, --tls-key and --tls-server-name, of
// every command that connects to the lock nodes; each falls back to its
// environment variable. They apply to rediss:// nodes only.
type tlsFlags struct {
	files nodeaddr.TLSFiles
	// resolved are the files config used (the flags, else the
	// environment), for a lock client that reads them itself (a foreign
	// guard's adapter); zero for plain nodes.
	resolved nodeaddr.TLSFiles
}

func (t *tlsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&t.files.CA, "tls-ca", "", "with rediss:// nodes: PEM file of the CA that signs the nodes' certificates (default $"+envTLSCA+", else the system's roots)")
	fs.StringVar(&t.files.Cert, "tls-cert", "", "with rediss:// nodes: PEM client certificate, for nodes that check clients (default $"+envTLSCert+")")
	fs.StringVar(&t.files.Key, "tls-key", "", "with rediss:// nodes: PEM key of --tls-cert (default $"+envTLSKey+")")
	fs.StringVar(&t.files.ServerName, "tls-server-name", "", "with rediss:// nodes: the name every node's certificate must carry (default $"+envTLSServerName+", else each node's own host)")
}

// config returns the TLS configuration for nodes: nil for plain nodes, or a
// usage error naming the flag whose file is wrong. TLS settings given for
// plain nodes are refused; those of the environment are ignored then, so
// that a shell set up for a TLS lab can still reach a plain node by --nodes.
func (t *tlsFlags) config(nodes nodeaddr.List) (*tls.Config, error) {
	f := t.files
	if !nodes.TLS {
		if !f.IsZero() {
			return nil, usageErrorf("--tls-ca, --tls-cert, --tls-key and --tls-server-name apply to rediss:// nodes; the nodes %s are plain: address them as rediss://host:port to use TLS", nodes)
		}
		return nil, nil
	}
	for _, v := range []struct {
		dst *string
		env string
	}{{&f.CA, envTLSCA}, {&f.Cert, envTLSCert}, {&f.Key, envTLSKey}, {&f.ServerName, envTLSServerName}} {
		if *v.dst == "" {
			*v.dst = os.Getenv(v.env)
		}
	}
	cfg, err := nodes.TLSConfig(f)
	if err != nil {
		return nil, usageErrorf("TLS (--tls-ca %q, --tls-cert %q, --tls-key %q): %v", f.CA, f.Cert, f.Key, err)
	}
	t.resolved = f
	return cfg, nil
}

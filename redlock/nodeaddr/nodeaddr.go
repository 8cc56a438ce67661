// Package nodeaddr is the one parser of a Redlock node list, as commands
// take it (--nodes, REDLAB_NODES) and the lab exports it:
// host:port[,host:port…] for plain TCP, rediss://host:port[,…] for TLS; and
// the one builder of the *tls.Config those nodes are dialled with, from PEM
// files (TLSFiles). redlock.WithTLS takes the config.
//
// A list is all TLS or all plain: a mixed list is refused. A lock's nodes
// share one security posture, and one plain node among TLS ones would carry
// the lock traffic and the password in clear while the list looks
// protected.
package nodeaddr

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// Scheme is the prefix of a TLS node's address.
const Scheme = "rediss://"

// List is a parsed node list: the addresses (host:port) and whether the
// nodes speak TLS.
type List struct {
	Addrs []string
	TLS   bool
}

// Parse parses a comma-separated node list (blanks around the commas and
// empty items ignored). Each item is host:port, or rediss://host:port for a
// TLS node; a list mixing both, a repeated node or an empty list is
// refused.
func Parse(s string) (List, error) {
	var l List
	seen := map[string]bool{}
	plain, secure := "", ""
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		addr, isTLS, err := parseOne(item)
		if err != nil {
			return List{}, fmt.Errorf("node %q: %w", item, err)
		}
		if isTLS {
			secure = item
		} else {
			plain = item
		}
		if plain != "" && secure != "" {
			return List{}, fmt.Errorf("node list mixes TLS (%s) and plain (%s) nodes: use rediss:// for all of them or for none; one plain node would carry the lock traffic and the password in clear", secure, plain)
		}
		if seen[addr] {
			return List{}, fmt.Errorf("node %q listed twice", addr)
		}
		seen[addr] = true
		l.Addrs = append(l.Addrs, addr)
		l.TLS = isTLS
	}
	if len(l.Addrs) == 0 {
		return List{}, fmt.Errorf("no nodes in %q", s)
	}
	return l, nil
}

func parseOne(item string) (addr string, isTLS bool, err error) {
	addr = item
	if rest, ok := strings.CutPrefix(item, Scheme); ok {
		addr, isTLS = rest, true
	} else if scheme, _, ok := strings.Cut(item, "://"); ok {
		return "", false, fmt.Errorf("scheme %s:// is not supported: want host:port, or rediss://host:port for TLS", scheme)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", false, fmt.Errorf("want host:port or rediss://host:port: %w", err)
	}
	if host == "" {
		return "", false, errors.New("empty host")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", false, errors.New("port must be 1-65535")
	}
	return addr, isTLS, nil
}

// String formats the list as Parse reads it.
func (l List) String() string {
	if !l.TLS {
		return strings.Join(l.Addrs, ",")
	}
	out := make([]string, len(l.Addrs))
	for i, a := range l.Addrs {
		out[i] = Scheme + a
	}
	return strings.Join(out, ",")
}

// TLSFiles name the PEM files and the server name of a TLS client.
type TLSFiles struct {
	// CA is the CA certificate(s) the nodes' certificates must chain to
	// (empty: the system's roots).
	CA string
	// Cert and Key are the client's own certificate and key, for nodes that
	// check clients (tls-auth-clients); both or neither.
	Cert, Key string
	// ServerName is the name every node's certificate must carry (empty:
	// each node's own host, as redis-cli does).
	ServerName string
}

// IsZero reports whether no file and no server name is set.
func (f TLSFiles) IsZero() bool { return f == TLSFiles{} }

// Config builds the TLS client configuration: TLS 1.2 or newer, the CA as
// the only roots when given, the client certificate when given.
func (f TLSFiles) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("nodeaddr: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("nodeaddr: CA file %s holds no PEM certificate", f.CA)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.Cert != "" && f.Key != "":
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("nodeaddr: client certificate %s with key %s: %w", f.Cert, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case f.Cert != "" || f.Key != "":
		return nil, errors.New("nodeaddr: a client certificate needs both the certificate and its key")
	}
	return cfg, nil
}

// TLSConfig is the TLS configuration to dial l's nodes with: nil for plain
// nodes, f.Config() for TLS ones. TLS files given for plain nodes are
// refused rather than ignored: whoever gave them meant the nodes to speak
// TLS.
func (l List) TLSConfig(f TLSFiles) (*tls.Config, error) {
	if !l.TLS {
		if !f.IsZero() {
			return nil, errors.New("nodeaddr: TLS settings given for plain nodes: address the nodes as rediss://host:port to use TLS")
		}
		return nil, nil
	}
	return f.Config()
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/tlscert"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// tlsRig is a set of real TLS-only redis-servers with certificates good and
// bad, and the CA files a client can be given.
type tlsRig struct {
	good                    []*redlocktest.Node // certificates for 127.0.0.1 from ca
	expired, misnamed       *redlocktest.Node
	plain                   *redlocktest.Node
	caFile, otherCAFile     string
	goodList, goodAddrsList string // rediss://… and host:port…
}

func newTLSRig(t *testing.T) *tlsRig {
	t.Helper()
	now := time.Now()
	newCA := func(name string) *tlscert.CA {
		ca, err := tlscert.NewCA(name, now.Add(-48*time.Hour), now.Add(48*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	ca, other := newCA("redlab test CA"), newCA("someone else's CA")
	dir := t.TempDir()
	r := &tlsRig{caFile: filepath.Join(dir, "ca.crt"), otherCAFile: filepath.Join(dir, "other.crt")}
	for path, c := range map[string]*tlscert.CA{r.caFile: ca, r.otherCAFile: other} {
		if err := os.WriteFile(path, c.PEM, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		r.good = append(r.good, redistest.StartTLS(t, ca, []string{"127.0.0.1", "localhost"}, now.Add(-time.Hour), now.Add(90*24*time.Hour)))
	}
	r.expired = redistest.StartTLS(t, ca, []string{"127.0.0.1"}, now.Add(-48*time.Hour), now.Add(-time.Hour))
	r.misnamed = redistest.StartTLS(t, ca, []string{"redis-7.example"}, now.Add(-time.Hour), now.Add(24*time.Hour))
	r.plain = redlocktest.Start(t, 1, redlocktest.Options{}).Nodes[0]
	var tlsList, plainList []string
	for _, n := range r.good {
		tlsList = append(tlsList, "rediss://"+n.Addr)
		plainList = append(plainList, n.Addr)
	}
	r.goodList, r.goodAddrsList = strings.Join(tlsList, ","), strings.Join(plainList, ",")
	return r
}

func clearTLSEnv(t *testing.T) {
	for _, v := range []string{envNodes, envTLSCA, envTLSCert, envTLSKey, envTLSServerName, "REDLAB_CREDENTIALS", envPassword} {
		t.Setenv(v, "")
	}
}

// TestTLSDoctor audits TLS nodes: each node's protocol and certificate
// expiry, and for every certificate that does not verify, and every node
// addressed in the wrong protocol, the node and the reason in plain words.
func TestTLSDoctor(t *testing.T) {
	r := newTLSRig(t)
	clearTLSEnv(t)
	bad := func(n *redlocktest.Node) string { return r.good[0].Addr + "," + r.good[1].Addr + "," + n.Addr }
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		want     []string
	}{
		{name: "verified", args: []string{"--nodes", r.goodList, "--tls-ca", r.caFile}, wantCode: exitOK,
			want: []string{"1 " + r.good[0].Addr + "  tls", "TLS 1.3, certificate valid until", "(89 days)", "3 nodes; 29 findings: 0 critical, 0 warnings, 29 ok"}},
		{name: "from the environment", env: map[string]string{envNodes: r.goodList, envTLSCA: r.caFile}, wantCode: exitOK,
			want: []string{"TLS 1.3, certificate valid until", "0 critical"}},
		{name: "server name given", args: []string{"--nodes", r.goodList, "--tls-ca", r.caFile, "--tls-server-name", "localhost"}, wantCode: exitOK,
			want: []string{"0 critical"}},
		{name: "wrong CA", args: []string{"--nodes", r.goodList, "--tls-ca", r.otherCAFile}, wantCode: exitFailure,
			want: []string{"redlock: node " + r.good[2].Addr + " (TLS): TLS handshake failed: the node's certificate is signed by \"CN=redlab test CA\", not by a CA this client trusts"}},
		{name: "expired", args: []string{"--nodes", "rediss://" + strings.ReplaceAll(bad(r.expired), ",", ",rediss://"), "--tls-ca", r.caFile}, wantCode: exitFailure,
			want: []string{"3 " + r.expired.Addr + "  reachable", "redlock: node " + r.expired.Addr + " (TLS): TLS handshake failed: the node's certificate expired at ", "2 of 3 nodes answer"}},
		{name: "name mismatch", args: []string{"--nodes", "rediss://" + strings.ReplaceAll(bad(r.misnamed), ",", ",rediss://"), "--tls-ca", r.caFile}, wantCode: exitFailure,
			want: []string{"redlock: node " + r.misnamed.Addr + " (TLS): TLS handshake failed: the node's certificate is for redis-7.example, not for \"127.0.0.1\""}},
		{name: "rediss:// to a plain node", args: []string{"--nodes", "rediss://" + r.plain.Addr, "--tls-ca", r.caFile, "--timeout", "250ms"}, wantCode: exitFailure,
			want: []string{"redlock: node " + r.plain.Addr + " (TLS): TLS handshake failed: the node answers plain-text PING on this port: it does not speak TLS"}},
		{name: "plain to a TLS node", args: []string{"--nodes", r.goodAddrsList}, wantCode: exitFailure,
			want: []string{"redlock: node " + r.good[0].Addr + " (plain TCP): the node closed the connection without a reply, as a TLS-only port does with plain text (address it as rediss://host:port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, out, errOut := runDoctorArgs(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("got exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestTLSDoctorJSON: --json carries each node's TLS version and
// certificate expiry.
func TestTLSDoctorJSON(t *testing.T) {
	r := newTLSRig(t)
	clearTLSEnv(t)
	code, out, errOut := runDoctorArgs(t, "--nodes", r.goodList, "--tls-ca", r.caFile, "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Nodes []struct {
			TLS          string `json:"tls"`
			CertNotAfter string `json:"cert_not_after"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	for i, n := range rep.Nodes {
		if n.TLS != "TLS 1.3" {
			t.Errorf("node %d: tls %q, want TLS 1.3", i+1, n.TLS)
		}
		if at, err := time.Parse(time.RFC3339, n.CertNotAfter); err != nil || time.Until(at) < 80*24*time.Hour {
			t.Errorf("node %d: cert_not_after %q (%v), want the certificate's expiry, 90 days out", i+1, n.CertNotAfter, err)
		}
	}
	if len(rep.Nodes) != 3 {
		t.Errorf("got %d nodes, want 3", len(rep.Nodes))
	}
}

// TestTLSFlags checks the TLS flags' usage errors: each says what is wrong
// before anything connects.
func TestTLSFlags(t *testing.T) {
	r := newTLSRig(t)
	clearTLSEnv(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"mixed list", []string{"--nodes", "rediss://" + r.good[0].Addr + "," + r.good[1].Addr}, "mixes TLS (rediss://" + r.good[0].Addr + ") and plain (" + r.good[1].Addr + ") nodes"},
		{"TLS flags for plain nodes", []string{"--nodes", r.goodAddrsList, "--tls-ca", r.caFile}, "apply to rediss:// nodes; the nodes " + r.goodAddrsList + " are plain"},
		{"missing CA file", []string{"--nodes", r.goodList, "--tls-ca", "/nonexistent/ca.crt"}, `TLS (--tls-ca "/nonexistent/ca.crt"`},
		{"certificate without key", []string{"--nodes", r.goodList, "--tls-cert", r.caFile}, "needs both the certificate and its key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cmd := range [][]string{{"doctor"}, {"load", "--rate", "10", "--duration", "1s", "--out", filepath.Join(t.TempDir(), "run")}} {
				code, out, errOut := runArgs(t, append(cmd, tc.args...)...)
				if code != exitUsage || !strings.Contains(errOut, tc.want) {
					t.Errorf("%s: got exit %d, stderr %q; want %d with %q\nstdout: %s", cmd[0], code, errOut, exitUsage, tc.want, out)
				}
			}
		})
	}
}

// TestTLSLoadAndServe runs load and serve against TLS nodes: with the CA
// they work; with the wrong CA each node's first error says why.
func TestTLSLoadAndServe(t *testing.T) {
	r := newTLSRig(t)
	clearTLSEnv(t)
	code, stdout, stderr := runCmd(t, nil, "load", "--nodes", r.goodList, "--tls-ca", r.caFile, "--guard", "redlock",
		"--rate", "20", "--duration", "1s", "--node-timeout", "1s", "--acquire-timeout", "10s", "--lock-ttl", "30s",
		"--out", filepath.Join(t.TempDir(), "ok"), "--threshold", "outcomes.error==0", "--threshold", "requests==20")
	if code != exitOK || strings.Contains(stderr, "first error") {
		t.Errorf("load with the CA: exit %d, want 0 and no node error\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}

	code, stdout, stderr = runCmd(t, nil, "load", "--nodes", r.goodList, "--tls-ca", r.otherCAFile, "--guard", "redlock",
		"--rate", "10", "--duration", "1s", "--out", filepath.Join(t.TempDir(), "bad"))
	if code != exitFailure {
		t.Errorf("load with the wrong CA: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitFailure, stdout, stderr)
	}
	for i, n := range r.good {
		want := fmt.Sprintf("node%d %s: first error: redlock: node %s (TLS): TLS handshake failed: the node's certificate is signed by \"CN=redlab test CA\", not by a CA this client trusts", i+1, n.Addr, n.Addr)
		if !strings.Contains(stderr, want) {
			t.Errorf("load stderr lacks %q:\n%s", want, stderr)
		}
	}

	for _, guard := range []string{"redlock", "redsync"} {
		s := startServe(t, "--nodes", r.goodList, "--tls-ca", r.caFile, "--guard", guard, "--store", "sqlite:"+filepath.Join(t.TempDir(), "inv.db"))
		if code, body := s.call(t, "GET", "/readyz", ""); code != 200 {
			t.Errorf("serve --guard %s with the CA: readyz %d %v, want 200", guard, code, body)
		}
		bad := startServe(t, "--nodes", "rediss://"+r.expired.Addr, "--tls-ca", r.caFile, "--guard", guard, "--store", "sqlite:"+filepath.Join(t.TempDir(), "inv.db"))
		want := "redlab serve: node1 " + r.expired.Addr + ": no answer at start: redlock: node " + r.expired.Addr + " (TLS): TLS handshake failed: the node's certificate expired at "
		if !strings.Contains(bad.stderr.String(), want) {
			t.Errorf("serve --guard %s, expired certificate: stderr lacks %q:\n%s", guard, want, bad.stderr.String())
		}
	}
}

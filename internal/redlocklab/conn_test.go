package redlocklab_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/tlscert"
	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

func newTestCA(t *testing.T, name string) *tlscert.CA {
	t.Helper()
	now := time.Now()
	ca, err := tlscert.NewCA(name, now.Add(-48*time.Hour), now.Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func trusting(ca *tlscert.CA) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// TestTLSConnErrors connects to real TLS-only and plain redis-servers with
// certificates that must not verify, and checks that each failure names the
// node and says what failed in plain words.
func TestTLSConnErrors(t *testing.T) {
	ca, other := newTestCA(t, "lab CA"), newTestCA(t, "other CA")
	now := time.Now()
	good := redistest.StartTLS(t, ca, []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(24*time.Hour))
	expired := redistest.StartTLS(t, ca, []string{"127.0.0.1"}, now.Add(-48*time.Hour), now.Add(-time.Hour))
	misnamed := redistest.StartTLS(t, ca, []string{"redis-9.example"}, now.Add(-time.Hour), now.Add(24*time.Hour))
	plain := redlocktest.Start(t, 1, redlocktest.Options{}).Nodes[0]

	for _, tc := range []struct {
		name string
		node *redlocktest.Node
		tls  *tls.Config
		want string // "" for success
	}{
		{"verified", good, trusting(ca), ""},
		{"wrong CA", good, trusting(other), `the node's certificate is signed by "CN=lab CA", not by a CA this client trusts`},
		{"expired", expired, trusting(ca), "the node's certificate expired at " + now.Add(-time.Hour).UTC().Format("2006-01-02T15")},
		{"name mismatch", misnamed, trusting(ca), `the node's certificate is for redis-9.example, not for "127.0.0.1"`},
		{"TLS to a plain node", plain, trusting(ca), "the node answers plain-text PING on this port: it does not speak TLS"},
		{"plain to a TLS node", good, nil, "rediss://host:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := redlock.NewNodes([]string{tc.node.Addr}, redlock.WithTLS(tc.tls), redlock.WithNodeTimeout(time.Second))
			defer nodes[0].Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := nodes[0].Ping(ctx).Err()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("PING: %v, want success", err)
				}
				return
			}
			var ce *redlock.ConnError
			if !errors.As(err, &ce) {
				t.Fatalf("PING: got %v (%T), want a *redlock.ConnError", err, err)
			}
			if ce.Addr != tc.node.Addr || !strings.Contains(err.Error(), tc.node.Addr) {
				t.Errorf("error names node %q: %v, want %s", ce.Addr, err, tc.node.Addr)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestCheckTLS checks that the doctor's audit reports the protocol version
// and the certificate's expiry, and warns under 30 days.
func TestCheckTLS(t *testing.T) {
	ca := newTestCA(t, "lab CA")
	now := time.Now()
	long := redistest.StartTLS(t, ca, []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(400*24*time.Hour))
	soon := redistest.StartTLS(t, ca, []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(10*24*time.Hour+time.Hour))
	nodes := redlock.NewNodes([]string{long.Addr, soon.Addr}, redlock.WithTLS(trusting(ca)), redlock.WithNodeTimeout(time.Second))
	for _, n := range nodes {
		defer n.Close()
	}
	c, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rep, err := c.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		sev redlock.Severity
		msg string
	}{{redlock.Info, "TLS 1.3, certificate valid until " + now.Add(400*24*time.Hour).UTC().Format("2006-01-02")}, {redlock.Warning, "(10 days): it expires in under 30 days"}} {
		k := slices.IndexFunc(rep.Findings, func(f redlock.Finding) bool { return f.Node == i && f.Check == "tls" })
		if k < 0 {
			t.Fatalf("node %d: no tls finding in %+v", i, rep.Findings)
		}
		f := rep.Findings[k]
		if f.Severity != want.sev || !strings.Contains(f.Message, want.msg) {
			t.Errorf("node %d: got %v %q, want %v containing %q", i, f.Severity, f.Message, want.sev, want.msg)
		}
		if rep.Nodes[i].TLS != "TLS 1.3" || rep.Nodes[i].CertNotAfter.IsZero() {
			t.Errorf("node %d: TLS %q, expiry %v; want TLS 1.3 and the expiry", i, rep.Nodes[i].TLS, rep.Nodes[i].CertNotAfter)
		}
	}
}

// TestTLSNodeRestart: after a TLS node restarts, the first command on the
// client succeeds: the pool drops the connections the node closed before
// sending on them, as with plain TCP, instead of failing one command per
// stale connection with EOF.
func TestTLSNodeRestart(t *testing.T) {
	ca := newTestCA(t, "lab CA")
	now := time.Now()
	n := redistest.StartTLS(t, ca, []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(time.Hour))
	c := redlock.NewNodes([]string{n.Addr}, redlock.WithTLS(trusting(ca)), redlock.WithNodeTimeout(time.Second))[0]
	defer c.Close()
	ctx := context.Background()
	for i := range 4 { // fill the pool beyond one connection
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING %d: %v", i, err)
		}
	}
	n.Stop()
	n.Restart()
	for i := range 8 {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING %d after the restart: %v, want every one answered", i, err)
		}
	}
}

// TestTLSResp3IdleConnections: a RESP3 client (go-redis's default, as the
// redsync guard builds its clients) with TLS through WithTLS reuses idle
// connections that never ran a command. Those hold the node's TLS 1.3
// session tickets, which go-redis's push-notification check would read
// through TLS, waiting for a reply that never comes, if the dialer showed
// it the socket. RESP2 clients (this package's) get the socket check.
func TestTLSResp3IdleConnections(t *testing.T) {
	ca := newTestCA(t, "lab CA")
	now := time.Now()
	n := redistest.StartTLS(t, ca, []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(time.Hour))
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		o := &redis.Options{Addr: n.Addr, Protocol: proto}
		redlock.WithTLS(trusting(ca))(o)
		conn, err := o.Dialer(ctx, "tcp", n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, socket := conn.(syscall.Conn); socket != (proto == 2) {
			t.Errorf("RESP%d: the pool sees the socket %v, want %v", proto, socket, proto == 2)
		}
		conn.Close()
	}

	o := &redis.Options{Addr: n.Addr, MinIdleConns: 4, PoolSize: 4}
	redlock.WithTLS(trusting(ca))(o)
	c := redis.NewClient(o)
	defer c.Close()
	// Let the idle connections be dialled and the tickets arrive; then
	// every command must be answered. A hang is reported, not waited out.
	for c.PoolStats().IdleConns < 4 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		for i := range 16 {
			if err := c.Ping(ctx).Err(); err != nil {
				done <- fmt.Errorf("PING %d: %w", i, err)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("PINGs on idle RESP3 TLS connections never returned: the pool's check reads through TLS")
	}
}

// TestTLSIdleConnectionsReused: this package's clients keep the idle TLS
// connections the pool dialled ahead. Those hold the node's session
// tickets until they first run a command; the pool's look at the socket
// must not take them for dead ones (StaleConns), or every one is dropped
// and dialled again, and the pool's top-ups repeat it under load.
func TestTLSIdleConnectionsReused(t *testing.T) {
	ca := newTestCA(t, "lab CA")
	now := time.Now()
	n := redistest.StartTLS(t, ca, []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(time.Hour))
	c := redlock.NewNodes([]string{n.Addr}, redlock.WithTLS(trusting(ca)), redlock.WithNodeTimeout(time.Second), redlock.WithPoolSize(4))[0]
	defer c.Close()
	for c.PoolStats().IdleConns < uint32(redlock.DefaultMinIdleConns) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the tickets arrive
	ctx := context.Background()
	for i := range 16 {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING %d: %v", i, err)
		}
	}
	if st := c.PoolStats(); st.StaleConns != 0 {
		t.Errorf("pool stats %+v: %d idle connections dropped as dead, want 0", st, st.StaleConns)
	}
}

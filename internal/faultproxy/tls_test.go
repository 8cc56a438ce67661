//go:build linux

package faultproxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/tlscert"
	"github.com/redlocklab/redlocklab/redlock"
)

// TestTLSPassesThrough puts the fault front before a real TLS-only
// redis-server, as the lab does with `lab up --tls`: the client's handshake
// and its commands cross the front untouched (the certificate, for
// 127.0.0.1, verifies through the front's own 127.0.0.1 address), and the
// front's faults apply to TLS as to plain TCP.
func TestTLSPassesThrough(t *testing.T) {
	now := time.Now()
	ca, err := tlscert.NewCA("lab CA", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	node := redistest.StartTLS(t, ca, tlscert.LabHosts, now.Add(-time.Hour), now.Add(time.Hour))
	front := redistest.NewProxy(t, node.Addr)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	c := redlock.NewNodes([]string{front.Addr}, redlock.WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), redlock.WithNodeTimeout(2*time.Second))[0]
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the front over TLS: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET through the front: %q, %v; want v", got, err)
	}

	const add = 40 * time.Millisecond
	front.AddLatency(t, add, 0)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING under latency: %v", err)
	}
	if got := time.Since(start); got < add {
		t.Errorf("PING under %v of latency took %v, want at least that", add, got)
	}
	front.Heal()

	front.Blackhole(t)
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	var ne net.Error
	if err := c.Ping(pctx).Err(); !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
		t.Errorf("PING through a partitioned front: %v, want a timeout (silence)", err)
	}
	front.Heal()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after the partition healed: %v", err)
	}
}

package verify

import (
	"context"
	"errors"
	"fmt"
	"github.com/redlocklab/redlocklab/internal/flock"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/machine"
	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/internal/tlscert"
	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/nodeaddr"
)

// tlsAddr is the machine of TestTLSNodeUnderSystemd, clear of
// TestNodeUnderSystemd's.
const tlsAddr = "127.0.79.40"

// TestTLSNodeUnderSystemd boots a TLS node's user data, as modules/aws
// renders it with tls, in a Debian 12 machine: the Redis unit starts
// redlock-tls-fetch.service before Redis (here the fetch script writes
// files it carries, where modules/aws's reads SSM), Redis serves TLS only
// on its port with those files, and a restart of Redis runs the fetch
// again, as a renewed certificate needs.
func TestTLSNodeUnderSystemd(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "booting machines needs root (debootstrap, overlay mounts, systemd-nspawn)")
	}
	for _, prog := range []string{"debootstrap", "systemd-nspawn", "nsenter", "chronyd"} {
		requireProgram(t, prog)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	unlock, err := flock.Lock(ctx, filepath.Join(os.TempDir(), "redlock-lab-node-systemd.lock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
	img, err := machine.EnsureImage(ctx, machine.ImageConfig{Log: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}

	now := time.Now()
	ca, err := tlscert.NewCA("node test CA", now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue([]string{tlsAddr}, now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// Test only: the files travel inside the script. modules/aws's script
	// names SSM parameters instead and carries nothing secret.
	var script strings.Builder
	script.WriteString("#!/bin/sh\nset -eu\numask 077\nmkdir -p /etc/redis/tls\n")
	for name, pem := range map[string][]byte{"ca.crt": ca.PEM, "node.crt": pair.CertPEM, "node.key": pair.KeyPEM} {
		fmt.Fprintf(&script, "cat >/etc/redis/tls/%s <<'PEM'\n%sPEM\nchgrp redis /etc/redis/tls/%s\nchmod 0640 /etc/redis/tls/%s\n", name, pem, name, name)
	}
	script.WriteString("chgrp redis /etc/redis/tls\nchmod 0750 /etc/redis/tls\ndate +%s%N >>/var/lib/redlock-tls-fetches\n")
	n := render(t, map[string]map[string]any{"tls": {
		"bind_address": tlsAddr, "port": systemdPort, "max_lock_ttl": 3, "restart_margin": 1,
		"redlock_password": testRedlockPassword, "monitor_password": testMonitorPassword,
		"ntp_servers": []string{ntpAddr}, "ntp_poll_exponent": 4,
		"tls":              map[string]string{"cert_file": "/etc/redis/tls/node.crt", "key_file": "/etc/redis/tls/node.key", "ca_file": "/etc/redis/tls/ca.crt"},
		"tls_fetch_script": script.String(),
	}})["tls"]
	startNTPServer(t, ntpAddr)
	node := bootNode(ctx, t, img, "redlock-tls", tlsAddr, n)

	caFile := writeFile(t, t.TempDir(), "ca.crt", string(ca.PEM), 0o644)
	cfg, err := nodeaddr.TLSFiles{CA: caFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(tlsAddr, strconv.Itoa(systemdPort))
	c := redlock.NewNodes([]string{addr}, redlock.WithTLS(cfg), redlock.WithAuth("redlock", testRedlockPassword), redlock.WithNodeTimeout(500*time.Millisecond))[0]
	defer c.Close()
	ping := func() (bool, string) {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		err := c.Ping(pctx).Err()
		return err == nil, fmt.Sprint(err)
	}
	waitFor(ctx, t, "the node answers PING over TLS", ping)

	fetches := func() int {
		return len(strings.Fields(node.exec(ctx, t, "cat", "/var/lib/redlock-tls-fetches")))
	}
	if got := fetches(); got != 1 {
		t.Errorf("the fetch ran %d times before the first start, want once", got)
	}
	plain := redlock.NewNodes([]string{addr}, redlock.WithAuth("redlock", testRedlockPassword), redlock.WithNodeTimeout(500*time.Millisecond))[0]
	defer plain.Close()
	var ce *redlock.ConnError
	if err := plain.Ping(ctx).Err(); err == nil || !errors.As(err, &ce) {
		t.Errorf("a plain client: %v, want a ConnError (the node serves TLS only)", err)
	}

	node.exec(ctx, t, "systemctl", "restart", unitName)
	waitFor(ctx, t, "the node answers PING over TLS after a restart", ping)
	if got := fetches(); got != 2 {
		t.Errorf("after a restart of Redis the fetch ran %d times, want twice (once per start)", got)
	}
}

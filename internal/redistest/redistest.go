// Package redistest is the lab's part of the test harness for real
// redis-server processes: the nodes themselves are the Redlock library's
// redlocktest; this package adds what only the lab has: a fault front (the
// lab's, internal/faultproxy) before a node, TLS nodes with certificates
// from the lab's CA (internal/tlscert), and base ports for a lab's port
// layout.
package redistest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/portclaim"
	"github.com/redlocklab/redlocklab/internal/tlscert"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// FreeBasePort returns a base port such that base+offset+i is free on
// loopback right now for every offset and every i in 1..n: room for n nodes
// laid out like the lab's (offsets from lab.PortOffsets).
func FreeBasePort(tb testing.TB, n int, offsets ...int) int {
	tb.Helper()
	for range 50 {
		if base := 20000 + rand.IntN(40000); claim(tb, base, n, offsets) {
			return base
		}
	}
	tb.Fatal("redistest: no free base port")
	return 0
}

// claim claims the layout's ports for the rest of the test (see
// internal/portclaim: a lab in another test process, chosen while this one
// is not bound yet, cannot choose them too).
func claim(tb testing.TB, base, n int, offsets []int) bool {
	if len(offsets) == 0 {
		offsets = []int{0}
	}
	release, ok, err := portclaim.Claim(portclaim.Layout(base, n, offsets...))
	if err != nil {
		tb.Fatal(err)
	}
	if ok {
		tb.Cleanup(release)
	}
	return ok
}

// PortsFree reports whether base+offset+i is free on loopback right now for
// every offset and every i in 1..n.
func PortsFree(base, n int, offsets ...int) bool {
	for _, off := range offsets {
		for i := 1; i <= n; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+off+i))
			if err != nil {
				return false
			}
			l.Close()
		}
	}
	return true
}

// FreeStableBasePort is FreeBasePort for ports that must stay free for a
// while: a lab binds them seconds later, from other processes. The base is
// chosen below the kernel's ephemeral port range, from which every
// outgoing connection made meanwhile (on this machine, by any process)
// takes its local port.
func FreeStableBasePort(tb testing.TB, n int, offsets ...int) int {
	tb.Helper()
	span := n
	for _, off := range offsets {
		span = max(span, off+n)
	}
	const low = 10000
	high := ephemeralLow() - span - 1
	if high <= low {
		return FreeBasePort(tb, n, offsets...)
	}
	for range 50 {
		if base := low + rand.IntN(high-low); claim(tb, base, n, offsets) {
			return base
		}
	}
	tb.Fatal("redistest: no free base port below the ephemeral range")
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}

// StartTLS starts one TLS-only node (see redlocktest.Options.TLS) whose certificate,
// for hosts (IP addresses or names) and valid from notBefore to notAfter,
// is signed by ca; it writes the files into a temporary directory.
func StartTLS(tb testing.TB, ca *tlscert.CA, hosts []string, notBefore, notAfter time.Time) *redlocktest.Node {
	tb.Helper()
	bin := redlocktest.Server(tb)
	pair, err := ca.Issue(hosts, notBefore, notAfter)
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	f := tlscert.Files{CA: filepath.Join(dir, tlscert.CAFile), Cert: filepath.Join(dir, tlscert.CertFile), Key: filepath.Join(dir, tlscert.KeyFile)}
	if err := tlscert.WritePair(f, ca, pair); err != nil {
		tb.Fatal(err)
	}
	return redlocktest.StartNode(tb, bin, redlocktest.Options{TLS: &redlocktest.TLSFiles{Cert: f.Cert, Key: f.Key, CA: f.CA}})
}

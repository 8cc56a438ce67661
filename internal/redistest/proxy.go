package redistest

import (
	"sync"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/faultproxy"
)

// Proxy is an in-process fault front (internal/faultproxy, the one the lab
// puts in front of its nodes) before one node, so a test can add latency,
// cut the network or cap the node's capacity without root.
type Proxy struct {
	Addr string
	p    *faultproxy.Proxy
	mu   sync.Mutex // orders read-modify-write of the fault
}

// NewProxy starts a proxy on a free loopback port forwarding to upstream and
// stops it at cleanup.
func NewProxy(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	p, err := faultproxy.Listen("127.0.0.1:0", upstream)
	if err != nil {
		tb.Fatalf("redistest: start proxy: %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	return &Proxy{Addr: p.Addr(), p: p}
}

func (p *Proxy) update(fn func(*faultproxy.Fault)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.p.Fault()
	fn(&f)
	p.p.Set(f)
}

// AddLatency delays every reply from upstream by d (± jitter), in whole
// milliseconds.
func (p *Proxy) AddLatency(tb testing.TB, d, jitter time.Duration) {
	tb.Helper()
	p.update(func(f *faultproxy.Fault) { f.Latency, f.Jitter = d, jitter })
}

// Blackhole makes the proxy accept connections and bytes but answer nothing,
// so clients time out rather than being refused: a network partition.
func (p *Proxy) Blackhole(tb testing.TB) {
	tb.Helper()
	p.update(func(f *faultproxy.Fault) { f.Partition = true })
}

// Saturate makes the node behind the proxy a single server taking d for
// every request sent to it, from any connection: it serves at most one
// request per d, and load past that queues up and times out as on a node
// whose CPU is saturated.
func (p *Proxy) Saturate(tb testing.TB, d time.Duration) {
	tb.Helper()
	p.update(func(f *faultproxy.Fault) { f.ServiceTime = d })
}

// Heal removes every fault.
func (p *Proxy) Heal() {
	p.update(func(f *faultproxy.Fault) { *f = faultproxy.Fault{} })
}

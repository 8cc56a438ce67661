package redistest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is an in-process Toxiproxy listener in front of one node, so a test
// can add latency or cut the network without root.
type Proxy struct {
	Addr  string
	proxy *toxiproxy.Proxy
}

// NewProxy starts a proxy on a free loopback port forwarding to upstream and
// stops it at cleanup.
func NewProxy(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	metrics := toxiproxy.NewMetricsContainer(nil)
	srv := toxiproxy.NewServer(metrics, noLogger())
	p := toxiproxy.NewProxy(srv, fmt.Sprintf("redistest-%d", proxySeq.Add(1)), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		tb.Fatalf("redistest: start proxy: %v", err)
	}
	tb.Cleanup(p.Stop)
	return &Proxy{Addr: p.Listen, proxy: p}
}

// AddLatency delays every reply from upstream by d (± jitter).
func (p *Proxy) AddLatency(tb testing.TB, d, jitter time.Duration) {
	tb.Helper()
	p.addToxic(tb, "latency", "downstream", map[string]any{
		"latency": d.Milliseconds(), "jitter": jitter.Milliseconds(),
	})
}

// Blackhole makes the proxy accept connections and bytes but answer nothing,
// so clients time out rather than being refused: a network partition.
func (p *Proxy) Blackhole(tb testing.TB) {
	tb.Helper()
	p.addToxic(tb, "timeout", "upstream", map[string]any{"timeout": 0})
}

// Heal removes every toxic.
func (p *Proxy) Heal() {
	p.proxy.Toxics.ResetToxics(context.Background())
}

func (p *Proxy) addToxic(tb testing.TB, typ, stream string, attrs map[string]any) {
	tb.Helper()
	body, err := json.Marshal(map[string]any{
		"name": typ + "_" + stream, "type": typ, "stream": stream,
		"toxicity": 1.0, "attributes": attrs,
	})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := p.proxy.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		tb.Fatalf("redistest: add %s toxic: %v", typ, err)
	}
}

var proxySeq atomic.Int64

func noLogger() zerolog.Logger { return zerolog.Nop() }

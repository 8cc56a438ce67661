package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Toxic names. A partition is a timeout toxic with no timeout on both
// streams: the proxy keeps accepting connections and bytes but nothing
// reaches redis and nothing comes back, so clients time out instead of
// being refused, as they would behind a real network partition.
const (
	toxicPartitionUp   = "partition_upstream"
	toxicPartitionDown = "partition_downstream"
	toxicLatency       = "latency_downstream"
)

// proxy is the Toxiproxy listener in front of one redis-server, run as a
// library inside the supervisor.
type proxy struct {
	p      *toxiproxy.Proxy
	listen string
}

func startProxy(name, listen, upstream string) (*proxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, name, listen, upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("lab: proxy on %s: %w", listen, err)
	}
	return &proxy{p: p, listen: listen}, nil
}

// retarget points the proxy at another upstream: its listener restarts on
// the same address and every connection through it is closed, so clients
// reconnect to the new upstream (as after a failover behind Sentinel or a
// managed endpoint). Its toxics stay.
func (x *proxy) retarget(upstream string) error {
	if err := x.p.Update(&toxiproxy.Proxy{Listen: x.listen, Upstream: upstream, Enabled: true}); err != nil {
		return fmt.Errorf("lab: proxy on %s to %s: %w", x.listen, upstream, err)
	}
	return nil
}

// Stop closes the listener and every proxied connection. Idempotent.
func (x *proxy) Stop() { x.p.Stop() }

func (x *proxy) partition() error {
	if err := x.setToxic(toxicPartitionUp, "timeout", "upstream", map[string]any{"timeout": 0}); err != nil {
		return err
	}
	return x.setToxic(toxicPartitionDown, "timeout", "downstream", map[string]any{"timeout": 0})
}

// latency delays every reply by add ± jitter; add 0 removes the delay.
func (x *proxy) latency(add, jitter time.Duration) error {
	if add <= 0 {
		x.remove(toxicLatency)
		return nil
	}
	return x.setToxic(toxicLatency, "latency", "downstream", map[string]any{
		"latency": add.Milliseconds(), "jitter": jitter.Milliseconds(),
	})
}

// heal removes every toxic: partitions and latency.
func (x *proxy) heal() { x.p.Toxics.ResetToxics(context.Background()) }

// remove deletes a toxic; one that is not there is already removed.
func (x *proxy) remove(name string) {
	_ = x.p.Toxics.RemoveToxic(context.Background(), name)
}

func (x *proxy) setToxic(name, typ, stream string, attrs map[string]any) error {
	x.remove(name)
	body, err := json.Marshal(map[string]any{
		"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs,
	})
	if err != nil {
		return err
	}
	if _, err := x.p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
		return fmt.Errorf("lab: add %s toxic: %w", typ, err)
	}
	return nil
}

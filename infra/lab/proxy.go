package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
// library inside the supervisor. A switched proxy leads to a switcher, so
// that retarget can change its upstream without closing its listener.
type proxy struct {
	p  *toxiproxy.Proxy
	sw *switcher // nil: the upstream is fixed
}

func startProxy(name, listen, upstream string) (*proxy, error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, name, listen, upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("lab: proxy on %s: %w", listen, err)
	}
	return &proxy{p: p}, nil
}

// startSwitchedProxy is startProxy for an upstream that retarget can
// change: Toxiproxy (and its faults) in front, a switcher behind it.
func startSwitchedProxy(name, listen, upstream string) (*proxy, error) {
	sw, err := startSwitcher(upstream)
	if err != nil {
		return nil, err
	}
	x, err := startProxy(name, listen, sw.addr())
	if err != nil {
		sw.stop()
		return nil, err
	}
	x.sw = sw
	return x, nil
}

// retarget points a switched proxy at another upstream and closes every
// connection through it, so that clients reconnect to the new upstream (as
// after a failover behind Sentinel or a managed endpoint). The listener and
// its toxics stay.
func (x *proxy) retarget(upstream string) error {
	if x.sw == nil {
		return errors.New("lab: retarget of a proxy without a switch")
	}
	x.sw.switchTo(upstream)
	return nil
}

// Stop closes the listener and every proxied connection. Idempotent.
func (x *proxy) Stop() {
	x.p.Stop()
	if x.sw != nil {
		x.sw.stop()
	}
}

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

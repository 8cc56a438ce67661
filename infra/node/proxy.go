package node

import (
	"fmt"
	"sync"
	"time"

	"github.com/redlocklab/redlocklab/internal/faultproxy"
)

// proxy is the front in front of one redis-server (see internal/faultproxy):
// clients connect to it, and the network faults act in it. A partition is
// silence, not refusal: the front keeps accepting connections and bytes but
// nothing reaches redis and nothing comes back, so clients time out as they
// would behind a real partition.
//
// With no fault on it costs about half the CPU of the Toxiproxy listener it
// replaced.
type proxy struct {
	p *faultproxy.Proxy

	mu sync.Mutex // orders read-modify-write of the fault
}

func startProxy(name, listen, upstream string) (*proxy, error) {
	p, err := faultproxy.Listen(listen, upstream)
	if err != nil {
		return nil, fmt.Errorf("node: %s proxy on %s: %w", name, listen, err)
	}
	return &proxy{p: p}, nil
}

// retarget points the proxy at another upstream and closes every
// connection through it, so that clients reconnect to the new upstream (as
// after a failover behind Sentinel or a managed endpoint). The listener and
// its faults stay.
func (x *proxy) retarget(upstream string) error {
	if err := x.p.SetUpstream(upstream); err != nil {
		return fmt.Errorf("node: retarget: %w", err)
	}
	return nil
}

// Stop closes the listener and every proxied connection. Idempotent.
func (x *proxy) Stop() { x.p.Close() }

// update changes the fault in force with fn.
func (x *proxy) update(fn func(*faultproxy.Fault)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	f := x.p.Fault()
	fn(&f)
	x.p.Set(f)
}

func (x *proxy) partition() error {
	x.update(func(f *faultproxy.Fault) { f.Partition = true })
	return nil
}

// latency delays every reply by add ± jitter (whole milliseconds); add 0
// removes the delay.
func (x *proxy) latency(add, jitter time.Duration) error {
	if add <= 0 {
		add, jitter = 0, 0
	}
	x.update(func(f *faultproxy.Fault) { f.Latency, f.Jitter = add, jitter })
	return nil
}

// heal removes every network fault: partitions and latency.
func (x *proxy) heal() { x.update(func(f *faultproxy.Fault) { *f = faultproxy.Fault{} }) }

package node

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redlocklab/redlocklab/internal/faultproxy"
	"github.com/redlocklab/redlocklab/internal/redirect"
)

// proxy is the front in front of one redis-server (see internal/faultproxy):
// clients connect to it, and the network faults act in it. A partition is
// silence, not refusal: the front keeps accepting connections and bytes but
// nothing reaches redis and nothing comes back, so clients time out as they
// would behind a real partition.
//
// With no fault in force, the client front of a node on this machine hands
// its connections to the kernel (see internal/redirect): they go straight
// to the upstream, and the front carries none until a fault starts.
type proxy struct {
	p *faultproxy.Proxy

	mu       sync.Mutex // orders read-modify-write of the fault
	upstream string
	kr       *redirect.Front // nil: every connection goes through the front
}

func startProxy(name, listen, upstream string) (*proxy, error) {
	p, err := faultproxy.Listen(listen, upstream)
	if err != nil {
		return nil, fmt.Errorf("node: %s proxy on %s: %w", name, listen, err)
	}
	return &proxy{p: p, upstream: upstream}, nil
}

// redirect hands the front's connections to the kernel while no fault is
// in force, from now on, and returns the function that takes them back (to
// call before Stop).
func (x *proxy) redirect(ctx context.Context, kr *redirect.Front) (stop func(), err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.kr = kr
	if err := x.syncLocked(ctx); err != nil {
		x.kr = nil
		kr.Close(ctx)
		return nil, err
	}
	return func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.kr = nil
		kr.Close(context.Background())
	}, nil
}

// syncLocked turns the kernel redirect on when no fault is in force and
// the upstream is on this machine's loopback, and off otherwise.
func (x *proxy) syncLocked(ctx context.Context) error {
	if x.kr == nil {
		return nil
	}
	host, port, err := net.SplitHostPort(x.upstream)
	n, _ := strconv.Atoi(port)
	if x.p.Fault() != (faultproxy.Fault{}) || err != nil || host != "127.0.0.1" || n == 0 {
		return x.kr.Off(ctx)
	}
	return x.kr.On(ctx, n)
}

// retarget points the proxy at another upstream and closes every
// connection through it, so that clients reconnect to the new upstream (as
// after a failover behind Sentinel or a managed endpoint). The listener and
// its faults stay.
func (x *proxy) retarget(upstream string) error {
	ctx := context.Background()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.kr != nil {
		// The connections the kernel redirected are reset too.
		if err := x.kr.Off(ctx); err != nil {
			return fmt.Errorf("node: retarget: %w", err)
		}
	}
	if err := x.p.SetUpstream(upstream); err != nil {
		return fmt.Errorf("node: retarget: %w", err)
	}
	x.upstream = upstream
	if err := x.syncLocked(ctx); err != nil {
		return fmt.Errorf("node: retarget: %w", err)
	}
	return nil
}

// Stop closes the listener and every proxied connection. Idempotent.
func (x *proxy) Stop() { x.p.Close() }

// update changes the fault in force with fn. A fault needs every
// connection on the front: the kernel redirect goes before the fault is
// set (and resets what it redirected), and comes back once none is left.
func (x *proxy) update(fn func(*faultproxy.Fault)) error {
	ctx := context.Background()
	x.mu.Lock()
	defer x.mu.Unlock()
	f := x.p.Fault()
	fn(&f)
	if f != (faultproxy.Fault{}) && x.kr != nil {
		if err := x.kr.Off(ctx); err != nil {
			return fmt.Errorf("node: the front cannot take its connections back from the kernel, so the fault would miss them: %w", err)
		}
	}
	x.p.Set(f)
	if err := x.syncLocked(ctx); err != nil {
		return fmt.Errorf("node: fault %s is in force, but: %w", x.p.Fault(), err)
	}
	return nil
}

func (x *proxy) partition() error {
	return x.update(func(f *faultproxy.Fault) { f.Partition = true })
}

// latency delays every reply by add ± jitter (whole milliseconds); add 0
// removes the delay.
func (x *proxy) latency(add, jitter time.Duration) error {
	if add <= 0 {
		add, jitter = 0, 0
	}
	return x.update(func(f *faultproxy.Fault) { f.Latency, f.Jitter = add, jitter })
}

// heal removes every network fault: partitions and latency.
func (x *proxy) heal() error {
	return x.update(func(f *faultproxy.Fault) { *f = faultproxy.Fault{} })
}

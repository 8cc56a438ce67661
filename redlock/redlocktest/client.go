package redlocktest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/redlock"
)

// NewClient returns a Client over addrs whose nodes time out after
// nodeTimeout (redlock.WithNodeTimeout), closed with its node clients when
// the test ends.
func NewClient(tb testing.TB, addrs []string, nodeTimeout time.Duration, opts ...redlock.Option) *redlock.Client {
	tb.Helper()
	nodes := redlock.NewNodes(addrs, redlock.WithNodeTimeout(nodeTimeout))
	c, err := redlock.New(nodes, opts...)
	if err != nil {
		tb.Fatalf("redlocktest: New: %v", err)
	}
	tb.Cleanup(func() {
		c.Close()
		for _, n := range nodes {
			n.Close()
		}
	})
	return c
}

// Recorder is a redlock.Observer that keeps every Event, for a test to
// read while the Client still works. It is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	events []redlock.Event
}

var _ redlock.Observer = (*Recorder)(nil)

// Observe keeps e.
func (r *Recorder) Observe(e redlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// Since returns the events kept from index i on, and the index after them:
// the i to pass next time to see only what came since.
func (r *Recorder) Since(i int) ([]redlock.Event, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events[i:]), len(r.events)
}

// Eventually polls cond every 10 ms until it holds, and fails the test when
// it still does not after limit. It bounds a wait for work a Client does in
// the background, such as releasing the keys of a failed attempt; it
// asserts no timing.
func Eventually(tb testing.TB, limit time.Duration, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(limit); !cond(); {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: still not true after %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

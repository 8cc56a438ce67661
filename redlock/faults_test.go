package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/redlock"
)

// keysLeft counts, over every node, the keys of keys that are present.
func keysLeft(t *testing.T, ctx context.Context, nodes []*redis.Client, keys []string) int {
	t.Helper()
	n := 0
	for i, c := range nodes {
		vals, err := c.MGet(ctx, keys...).Result()
		if err != nil {
			t.Fatalf("MGET on node %d: %v", i, err)
		}
		for _, v := range vals {
			if v != nil {
				n++
			}
		}
	}
	return n
}

// plainClients returns one go-redis client per node for the test's own
// reads, closed at cleanup.
func plainClients(t *testing.T, nodes []*redistest.Node) []*redis.Client {
	t.Helper()
	out := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		out[i] = n.Client()
	}
	return out
}

// TestStalledMajorityLeavesNoKeys freezes three of five nodes (SIGSTOP) for
// each of many failed attempts, one fresh key each, and checks that once the
// nodes resume no key is left behind: the SETs they had queued run when they
// resume, and the cleanup, which could not get through while they were
// frozen, must still delete them.
//
// Before each attempt the Client pings every node, so that the SET goes out
// on a connection that is ready: a frozen node then has it queued. Every
// later request to a frozen node needs a new connection, whose HELLO the
// node never answers, so the cleanup's first release is never even sent.
func TestStalledMajorityLeavesNoKeys(t *testing.T) {
	cl := redistest.Start(t, 5, redistest.Options{})
	ctx := testCtx(t)
	const nodeTimeout = 50 * time.Millisecond
	c := newClient(t, cl.Addrs(), nodeTimeout)
	plain := plainClients(t, cl.Nodes)
	stalled := cl.Nodes[2:]
	setsBefore := 0
	for _, n := range stalled {
		setsBefore += commandCalls(t, n, "set")
	}

	const tries = 20
	keys := make([]string, tries)
	for i := range keys {
		keys[i] = fmt.Sprintf("stall-%d", i)
		eventually(t, 10*time.Second, "every node answers PING", func() bool {
			up, _ := c.Ping(ctx)
			return up == len(cl.Nodes)
		})
		for _, n := range stalled {
			n.Pause()
		}
		_, err := c.TryAcquire(ctx, keys[i], time.Minute)
		if !errors.Is(err, redlock.ErrUnavailable) {
			t.Errorf("try %d: got %v, want ErrUnavailable", i, err)
		}
		// Frozen for a while longer (varied, so that the nodes resume
		// at different points of the cleanup's retries).
		time.Sleep(rand.N(4 * nodeTimeout))
		for _, n := range stalled {
			n.Resume()
		}
	}

	// Once the last SETs queued on the frozen nodes have run, no key may
	// reappear. A node serves its connections in the order requests reached
	// it: two PINGs in a row on a connection of the test's own are answered
	// after everything queued before the first.
	for _, p := range plain[2:] {
		for range 2 {
			if err := p.Ping(ctx).Err(); err != nil {
				t.Fatalf("PING after resume: %v", err)
			}
		}
	}
	sets := -setsBefore
	for _, n := range stalled {
		sets += commandCalls(t, n, "set")
	}
	if sets < tries {
		t.Fatalf("frozen nodes ran %d SETs, want at least %d: the test did not queue SETs on them", sets, tries)
	}
	// The retries, not Close, must release the keys: wait for them (bounded,
	// well inside the TTL), not for Close.
	left := keysLeft(t, ctx, plain, keys)
	for deadline := time.Now().Add(10 * time.Second); left > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		left = keysLeft(t, ctx, plain, keys)
	}
	if left > 0 {
		tried := 0
		for _, k := range keys {
			if keysLeft(t, ctx, plain, []string{k}) > 0 {
				tried++
			}
		}
		t.Fatalf("10s after the nodes resumed: got %d keys set (of %d tries, %d left keys behind), want 0", left, tries, tried)
	}
	c.Close()
	if n := keysLeft(t, ctx, plain, keys); n != 0 {
		t.Errorf("after Close: got %d keys on the nodes, want 0", n)
	}
}

// TestReleaseRetriesStalledNodes releases a lock while two of five nodes are
// frozen and their ready connections used up: the release reaches a quorum
// at once, and the frozen nodes, which it could not even reach, are released
// in the background once they resume.
func TestReleaseRetriesStalledNodes(t *testing.T) {
	cl := redistest.Start(t, 5, redistest.Options{})
	ctx := testCtx(t)
	const nodeTimeout = testTimeout
	c := newClient(t, cl.Addrs(), nodeTimeout)
	plain := plainClients(t, cl.Nodes)
	// A lock whose key made it to every node: on a busy machine a SET can
	// miss its node timeout on a node that is not frozen yet.
	var (
		l   *redlock.Lock
		key string
	)
	for i := 0; l == nil; i++ {
		if i == 10 {
			t.Fatal("no lock with its key on every node after 10 tries")
		}
		key = fmt.Sprintf("release-stalled-%d", i)
		var err error
		if l, err = c.Acquire(ctx, key, time.Minute); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		onAll := func() bool { return keysLeft(t, ctx, plain, []string{key}) == len(cl.Nodes) }
		for deadline := time.Now().Add(2 * time.Second); !onAll() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if !onAll() {
			l.Release(ctx)
			l = nil
		}
	}
	for _, n := range cl.Nodes[3:] {
		n.Pause()
	}
	// Each PING to a frozen node takes a ready connection, times out and
	// closes it; the release then needs new connections, whose HELLO the
	// frozen nodes do not answer.
	for range 2 * redlock.DefaultMinIdleConns {
		c.Ping(ctx)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with two of five nodes frozen: %v", err)
	}
	// Frozen for longer than the request timeout: the release to the
	// frozen nodes times out, as it does in a real stall.
	time.Sleep(4 * nodeTimeout)
	for _, n := range cl.Nodes[3:] {
		n.Resume()
	}
	// As in TestStalledMajorityLeavesNoKeys, no retry and no Close: the
	// background retries alone must delete the keys.
	left := keysLeft(t, ctx, plain, []string{key})
	for deadline := time.Now().Add(10 * time.Second); left > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		left = keysLeft(t, ctx, plain, []string{key})
	}
	if left > 0 {
		t.Fatalf("10s after the nodes resumed: got the key on %d nodes, want none", left)
	}
}

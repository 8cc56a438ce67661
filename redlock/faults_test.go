package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
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
func plainClients(t *testing.T, nodes []*redlocktest.Node) []*redis.Client {
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
	cl := redlocktest.Start(t, 5, redlocktest.Options{})
	ctx := testCtx(t)
	const nodeTimeout = 50 * time.Millisecond
	// The breaker would refuse the attempts after the first few; each try
	// must send its SETs.
	c := redlocktest.NewClient(t, cl.Addrs(), nodeTimeout, redlock.WithCircuitBreaker(false))
	plain := plainClients(t, cl.Nodes)
	stalled := cl.Nodes[2:]
	setsBefore := 0
	for _, n := range stalled {
		setsBefore += n.CommandCalls(t, "set")
	}

	const tries = 20
	keys := make([]string, tries)
	for i := range keys {
		keys[i] = fmt.Sprintf("stall-%d", i)
		redlocktest.Eventually(t, 10*time.Second, "every node answers PING", func() bool {
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
		sets += n.CommandCalls(t, "set")
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
	cl := redlocktest.Start(t, 5, redlocktest.Options{})
	ctx := testCtx(t)
	const nodeTimeout = testTimeout
	c := redlocktest.NewClient(t, cl.Addrs(), nodeTimeout)
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

// TestCircuitBreakerFailsFastWithoutQuorum kills three of five nodes: after
// DefaultBreakerThreshold unavailable attempts the breaker opens, and later
// calls fail as unavailable having sent at most a probe's worth of attempts;
// once the nodes are back, a probe closes it and locks are granted again.
func TestCircuitBreakerFailsFastWithoutQuorum(t *testing.T) {
	cl := redlocktest.Start(t, 5, redlocktest.Options{})
	ctx := testCtx(t)
	rec := &redlocktest.Recorder{}
	// The default threshold; a cooldown long against the calls below, so
	// that the first of them come while the breaker is open.
	const cooldown = 2 * time.Second
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout, redlock.WithObserver(rec), redlock.WithBreakerPolicy(0, cooldown))
	for _, n := range cl.Nodes[2:] {
		n.Kill()
	}

	// The first call spends its attempts until the breaker opens.
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := c.Acquire(actx, "breaker", 10*time.Second)
	cancel()
	if !errors.Is(err, redlock.ErrUnavailable) || !errors.Is(err, redlock.ErrCircuitOpen) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first Acquire: got %v, want ErrUnavailable and ErrCircuitOpen before the context ran out", err)
	}
	if got := attemptError(t, err).Attempts; got != redlock.DefaultBreakerThreshold {
		t.Errorf("first Acquire: got %d attempts, want %d (the breaker's threshold)", got, redlock.DefaultBreakerThreshold)
	}
	events, next := rec.Since(0)
	if last := events[len(events)-1]; last.Breaker != redlock.BreakerOpen || !last.BreakerChanged || last.Rejected {
		t.Errorf("attempt that opened it: got breaker %v changed=%v rejected=%v, want open, changed, not rejected", last.Breaker, last.BreakerChanged, last.Rejected)
	}

	// Later calls: refused without sending, or at most one probe each.
	const calls = 10
	for i := range calls {
		var err error
		if i%2 == 0 {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err = c.Acquire(actx, fmt.Sprintf("breaker-%d", i), 10*time.Second)
			cancel()
		} else {
			_, err = c.TryAcquire(ctx, fmt.Sprintf("breaker-%d", i), 10*time.Second)
		}
		if !errors.Is(err, redlock.ErrUnavailable) || !errors.Is(err, redlock.ErrCircuitOpen) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d while open: got %v, want ErrUnavailable and ErrCircuitOpen at once", i, err)
		}
		if got := attemptError(t, err).Attempts; got > 1 {
			t.Errorf("call %d while open: got %d attempts, want at most 1 (a probe)", i, got)
		}
	}
	events, next = rec.Since(next)
	rejected := 0
	for _, e := range events {
		switch {
		case e.Rejected:
			rejected++
			if len(e.Nodes) != 0 || !errors.Is(e.Err, redlock.ErrCircuitOpen) || e.Breaker == redlock.BreakerClosed {
				t.Errorf("rejected event: got %d nodes, err %v, breaker %v; want none, ErrCircuitOpen, not closed", len(e.Nodes), e.Err, e.Breaker)
			}
		case !e.Probe:
			t.Errorf("event while open: got an attempt that was neither rejected nor a probe: %+v", e)
		}
	}
	if len(events) != calls {
		t.Errorf("got %d events for %d calls, want one each", len(events), calls)
	}
	if rejected == 0 {
		t.Errorf("got no rejected attempt among %d calls", calls)
	}

	// Back: a probe finds the quorum and closes the breaker.
	for _, n := range cl.Nodes[2:] {
		n.Restart()
	}
	var l *redlock.Lock
	for i := 0; l == nil; i++ {
		if i == 400 {
			t.Fatalf("no lock granted after the nodes came back: last error %v", err)
		}
		if l, err = c.TryAcquire(ctx, "breaker-back", 10*time.Second); err != nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
	events, next = rec.Since(next)
	if e := events[len(events)-1]; !e.Probe || e.Breaker != redlock.BreakerClosed || !e.BreakerChanged || e.Err != nil {
		t.Errorf("granted attempt: got probe=%v breaker %v changed=%v err %v, want the probe that closed the breaker", e.Probe, e.Breaker, e.BreakerChanged, e.Err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	l, err = c.Acquire(ctx, "breaker-after", 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire with the breaker closed: %v", err)
	}
	events, _ = rec.Since(next)
	if e := events[len(events)-1]; e.Op != redlock.OpAcquire || e.Probe || e.Breaker != redlock.BreakerClosed {
		t.Errorf("next attempt: got %v probe=%v breaker %v, want an ordinary acquire with the breaker closed", e.Op, e.Probe, e.Breaker)
	}
	if l.Attempts() != 1 {
		t.Errorf("got %d attempts, want 1", l.Attempts())
	}
}

// TestCircuitBreakerOff keeps retrying until the context ends.
func TestCircuitBreakerOff(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	rec := &redlocktest.Recorder{}
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout, redlock.WithObserver(rec), redlock.WithCircuitBreaker(false),
		redlock.WithMaxAttempts(2*redlock.DefaultBreakerThreshold), redlock.WithBackoff(redlock.RandomBackoff(time.Millisecond, 2*time.Millisecond)))
	cl.Nodes[1].Kill()
	cl.Nodes[2].Kill()
	_, err := c.Acquire(ctx, "no-breaker", 10*time.Second)
	if !errors.Is(err, redlock.ErrUnavailable) || errors.Is(err, redlock.ErrCircuitOpen) {
		t.Fatalf("got %v, want ErrUnavailable without ErrCircuitOpen", err)
	}
	if got := attemptError(t, err).Attempts; got != 2*redlock.DefaultBreakerThreshold {
		t.Errorf("got %d attempts, want %d (WithMaxAttempts)", got, 2*redlock.DefaultBreakerThreshold)
	}
	events, _ := rec.Since(0)
	for _, e := range events {
		if e.Breaker != 0 || e.Rejected || e.Probe {
			t.Errorf("event with the breaker off: got breaker %v rejected=%v probe=%v, want none", e.Breaker, e.Rejected, e.Probe)
		}
	}
}

// TestExtendRestoresLostKey restarts a node without persistence, so that it
// comes back without the lock's key, while another node is down: the lock
// now holds on one node, and Extend keeps it only by restoring the key.
func TestExtendRestoresLostKey(t *testing.T) {
	bin := redlocktest.Server(t)
	volatile := redlocktest.StartNode(t, bin, redlocktest.Options{Extra: []string{"appendonly no"}})
	cl := redlocktest.Start(t, 2, redlocktest.Options{})
	nodes := append([]*redlocktest.Node{volatile}, cl.Nodes...)
	addrs := []string{volatile.Addr, cl.Nodes[0].Addr, cl.Nodes[1].Addr}
	ctx := testCtx(t)
	rec := &redlocktest.Recorder{}
	c := redlocktest.NewClient(t, addrs, calmTimeout, redlock.WithObserver(rec))
	plain := plainClients(t, nodes)

	l, err := c.Acquire(ctx, "restore", 30*time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	redlocktest.Eventually(t, 5*time.Second, "key on every node", func() bool {
		return keysLeft(t, ctx, plain, []string{"restore"}) == len(nodes)
	})
	volatile.Kill()
	volatile.Restart()
	nodes[2].Kill()
	if got := keysLeft(t, ctx, plain[:1], []string{"restore"}); got != 0 {
		t.Fatalf("restarted node without persistence still has the key")
	}
	redlocktest.Eventually(t, 10*time.Second, "the client reaches the restarted node", func() bool {
		up, _ := c.Ping(ctx)
		return up == 2
	})

	_, next := rec.Since(0)
	if err := l.Extend(ctx, 30*time.Second); err != nil {
		t.Fatalf("Extend with the key lost on one node and another node down: %v", err)
	}
	events, _ := rec.Since(next)
	e := events[len(events)-1]
	if e.Op != redlock.OpExtend || e.Restored != 1 || !e.Nodes[0].Restored || e.Nodes[0].Outcome != redlock.Granted || e.Nodes[1].Restored {
		t.Errorf("extend event: got op %v restored %d, node 0 %v restored=%v, node 1 restored=%v; want 1 restored on node 0",
			e.Op, e.Restored, e.Nodes[0].Outcome, e.Nodes[0].Restored, e.Nodes[1].Restored)
	}
	v, err := plain[0].Get(ctx, "restore").Result()
	if err != nil || v != l.Token() {
		t.Errorf("restarted node: got %q (%v), want our token %s", v, err, l.Token())
	}
	if pttl, err := plain[0].PTTL(ctx, "restore").Result(); err != nil || pttl <= 10*time.Second {
		t.Errorf("restored key's PTTL: got %v (%v), want the extension's 30s TTL", pttl, err)
	}

	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	redlocktest.Eventually(t, 5*time.Second, "restored key released", func() bool {
		return keysLeft(t, ctx, plain[:2], []string{"restore"}) == 0
	})
}

// TestCircuitBreakerOpensOnBusyClient freezes three of five nodes (SIGSTOP:
// connections are accepted, nothing is answered) under a worker pool wider
// than the adaptive limit, already running, so that attempts queue for
// their places. A busy Client does not take a late node beside a prompt
// one for a node that is down (its own CPU could be the cause), but
// silence still is: the breaker must open, and calls must then fail with
// ErrCircuitOpen. No timing is asserted beyond the test's own bound.
func TestCircuitBreakerOpensOnBusyClient(t *testing.T) {
	cl := redlocktest.Start(t, 5, redlocktest.Options{})
	ctx := testCtx(t)
	var opened atomic.Bool
	obs := redlock.ObserverFunc(func(e redlock.Event) {
		if e.Op == redlock.OpAcquire && e.BreakerChanged && e.Breaker == redlock.BreakerOpen {
			opened.Store(true)
		}
	})
	c := redlocktest.NewClient(t, cl.Addrs(), 0, redlock.WithObserver(obs))
	const workers = 128
	var (
		wg               sync.WaitGroup
		granted          atomic.Int64
		circuitErr, stop atomic.Bool
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && !stop.Load(); i++ {
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				l, err := c.Acquire(actx, fmt.Sprintf("busy-%d-%d", w, i), 10*time.Second)
				cancel()
				switch {
				case err == nil:
					granted.Add(1)
					l.Release(ctx)
				case errors.Is(err, redlock.ErrCircuitOpen):
					circuitErr.Store(true)
				}
			}
		}()
	}
	t.Cleanup(func() {
		stop.Store(true)
		wg.Wait()
	})
	// The pool is busy (and the queue formed) before the nodes freeze.
	redlocktest.Eventually(t, 10*time.Second, "locks granted by the busy pool", func() bool { return granted.Load() >= 2*workers })
	for _, n := range cl.Nodes[2:] {
		n.Pause()
		t.Cleanup(n.Resume)
	}
	redlocktest.Eventually(t, 15*time.Second, "a call failing with ErrCircuitOpen", circuitErr.Load)
	if !opened.Load() {
		t.Error("calls failed with ErrCircuitOpen, but no attempt reported opening the breaker")
	}
}

package redlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// testTimeout is a short node timeout, for the tests where a node's timeout
// is what they look at or cannot change their verdict; tests that are about
// something else use calmTimeout.
const testTimeout = 250 * time.Millisecond

// calmTimeout is the node timeout of tests that are not about timeouts: far
// above the stalls of a loaded machine running the race detector, so that a
// slow scheduler cannot turn a test of exclusion, events or release into a
// test of timeouts.
const calmTimeout = 5 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func countEqual(vals []string, want string) int {
	n := 0
	for _, v := range vals {
		if v == want {
			n++
		}
	}
	return n
}

func attemptError(t *testing.T, err error) *redlock.AttemptError {
	t.Helper()
	var ae *redlock.AttemptError
	if !errors.As(err, &ae) {
		t.Fatalf("got error %v (%T), want *redlock.AttemptError", err, err)
	}
	return ae
}

func TestNewQuorum(t *testing.T) {
	if _, err := redlock.New(nil); err == nil {
		t.Fatal("New(nil): got nil error, want an error")
	}
	for _, tc := range []struct{ n, quorum int }{{1, 1}, {2, 2}, {3, 2}, {4, 3}, {5, 3}, {7, 4}} {
		nodes := redlock.NewNodes(make([]string, tc.n))
		for _, n := range nodes {
			defer n.Close()
		}
		c, err := redlock.New(nodes)
		if err != nil {
			t.Fatalf("New(%d nodes): %v", tc.n, err)
		}
		if c.Quorum() != tc.quorum || c.Size() != tc.n {
			t.Errorf("%d nodes: got quorum %d size %d, want quorum %d size %d", tc.n, c.Quorum(), c.Size(), tc.quorum, tc.n)
		}
	}
}

func TestInvalidArguments(t *testing.T) {
	c := redlocktest.NewClient(t, []string{"127.0.0.1:1"}, testTimeout)
	for _, tc := range []struct {
		name string
		key  string
		ttl  time.Duration
	}{{"empty key", "", time.Second}, {"zero ttl", "k", 0}, {"sub-millisecond ttl", "k", time.Microsecond}} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.TryAcquire(context.Background(), tc.key, tc.ttl); err == nil {
				t.Errorf("got nil error, want an argument error")
			}
		})
	}
}

func TestSecondClientWaitsForRelease(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	a := redlocktest.NewClient(t, cl.Addrs(), calmTimeout)
	b := redlocktest.NewClient(t, cl.Addrs(), calmTimeout, redlock.WithMaxAttempts(3), redlock.WithBackoff(redlock.RandomBackoff(time.Millisecond, 5*time.Millisecond)))

	la, err := a.Acquire(ctx, "classic", 10*time.Second)
	if err != nil {
		t.Fatalf("first Acquire: %v", err)
	}
	if got := countEqual(redlocktest.Values(t, cl.Nodes, "classic"), la.Token()); got < a.Quorum() {
		t.Fatalf("first token on %d nodes, want >= %d", got, a.Quorum())
	}

	_, err = b.Acquire(ctx, "classic", 10*time.Second)
	if !errors.Is(err, redlock.ErrContended) {
		t.Fatalf("second Acquire while held: got %v, want ErrContended", err)
	}
	if ae := attemptError(t, err); ae.Attempts != 3 {
		t.Errorf("got %d attempts, want 3 (WithMaxAttempts)", ae.Attempts)
	}

	if err := la.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	lb, err := b.Acquire(ctx, "classic", 10*time.Second)
	if err != nil {
		t.Fatalf("second Acquire after release: %v", err)
	}
	if lb.Token() == la.Token() {
		t.Fatalf("second lock reuses the first token %s", la.Token())
	}
	if got := countEqual(redlocktest.Values(t, cl.Nodes, "classic"), lb.Token()); got < b.Quorum() {
		t.Errorf("second token on %d nodes, want >= %d", got, b.Quorum())
	}
	if lb.Validity() <= 0 || lb.Validity() > 10*time.Second {
		t.Errorf("got validity %v, want within (0, 10s]", lb.Validity())
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func TestKilledNodes(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout, redlock.WithMaxAttempts(3), redlock.WithBackoff(redlock.RandomBackoff(time.Millisecond, 2*time.Millisecond)))

	cl.Nodes[2].Kill()
	l, err := c.Acquire(ctx, "killed", 5*time.Second)
	if err != nil {
		t.Fatalf("Acquire with one of three nodes down: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with one node down: %v", err)
	}

	cl.Nodes[1].Kill()
	_, err = c.Acquire(ctx, "killed", 5*time.Second)
	if !errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("Acquire with two of three nodes down: got %v, want ErrUnavailable", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v: the retry budget ran out, want the attempt limit to end it", err)
	}
	ae := attemptError(t, err)
	if ae.Attempts != 3 {
		t.Errorf("got %d attempts, want 3", ae.Attempts)
	}
	// Fast: the dead nodes refused the connection, nobody waited for a timeout.
	for _, i := range []int{1, 2} {
		if got := ae.Last.Nodes[i].Outcome; got != redlock.Failed {
			t.Errorf("node %d: got outcome %v, want %v", i, got, redlock.Failed)
		}
	}
}

func TestStaleReleaseKeepsNewHolder(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	a := redlocktest.NewClient(t, cl.Addrs(), calmTimeout)
	b := redlocktest.NewClient(t, cl.Addrs(), calmTimeout)

	la, err := a.Acquire(ctx, "stale", 100*time.Millisecond)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	redlocktest.Eventually(t, 5*time.Second, "first lock expired on every node", func() bool {
		return countEqual(redlocktest.Values(t, cl.Nodes, "stale"), "") == len(cl.Nodes)
	})
	lb, err := b.Acquire(ctx, "stale", 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire after expiry: %v", err)
	}

	err = la.Release(ctx)
	if !errors.Is(err, redlock.ErrExpired) || !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("stale Release: got %v, want ErrExpired and ErrNotHeld", err)
	}
	a.Close() // wait for the stale release on every node
	if got := redlocktest.Values(t, cl.Nodes, "stale"); countEqual(got, lb.Token()) != len(cl.Nodes) {
		t.Errorf("after stale release: got %q on the nodes, want %s everywhere", got, lb.Token())
	}
}

func TestExtend(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout)

	t.Run("within validity moves the TTL on a quorum", func(t *testing.T) {
		l, err := c.Acquire(ctx, "extend", 2*time.Second)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		before := l.Deadline()
		if err := l.Extend(ctx, 30*time.Second); err != nil {
			t.Fatalf("Extend: %v", err)
		}
		if !l.Deadline().After(before) || l.Validity() <= 2*time.Second {
			t.Errorf("after Extend(30s): got validity %v, deadline moved %v, want > 2s and later", l.Validity(), l.Deadline().Sub(before))
		}
		extended := 0
		for i, n := range cl.Nodes {
			pttl, err := n.Client().PTTL(ctx, "extend").Result()
			if err != nil {
				t.Fatalf("PTTL node %d: %v", i, err)
			}
			if pttl > 20*time.Second {
				extended++
			}
		}
		if extended < c.Quorum() {
			t.Errorf("got PTTL > 20s on %d nodes, want >= %d", extended, c.Quorum())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	})

	t.Run("after expiry is refused", func(t *testing.T) {
		l, err := c.Acquire(ctx, "extend-expired", 60*time.Millisecond)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		redlocktest.Eventually(t, 5*time.Second, "validity ran out", func() bool { return l.Validity() <= 0 })
		err = l.Extend(ctx, 10*time.Second)
		if !errors.Is(err, redlock.ErrExpired) {
			t.Fatalf("Extend after expiry: got %v, want ErrExpired", err)
		}
		if ae := attemptError(t, err); ae.Attempts != 0 {
			t.Errorf("got %d attempts, want 0: an expired lock must not touch the nodes", ae.Attempts)
		}
	})

	t.Run("lost lock is not held", func(t *testing.T) {
		l, err := c.Acquire(ctx, "extend-lost", 10*time.Second)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		// Lost and taken over: another token everywhere (a missing key
		// would be restored, see TestExtendRestoresLostKey).
		for _, n := range cl.Nodes {
			n.Client().Set(ctx, "extend-lost", "other", time.Minute)
		}
		if err := l.Extend(ctx, 10*time.Second); !errors.Is(err, redlock.ErrNotHeld) {
			t.Errorf("Extend of a deleted lock: got %v, want ErrNotHeld", err)
		}
		if err := l.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
			t.Errorf("Release of a deleted lock: got %v, want ErrNotHeld", err)
		}
	})
}

func TestContentionNeverOverlaps(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	const clients, workers, rounds = 3, 4, 8
	var holders, maxHolders, done, contended atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients*workers)
	obs := redlock.ObserverFunc(func(e redlock.Event) {
		if errors.Is(e.Err, redlock.ErrContended) {
			contended.Add(1)
		}
	})
	for range clients {
		c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout, redlock.WithObserver(obs), redlock.WithBackoff(redlock.RandomBackoff(time.Millisecond, 5*time.Millisecond)))
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					actx, cancel := context.WithTimeout(ctx, 15*time.Second)
					l, err := c.Acquire(actx, "hot", 10*time.Second)
					cancel()
					if err != nil {
						errs <- err
						return
					}
					n := holders.Add(1)
					for m := maxHolders.Load(); n > m && !maxHolders.CompareAndSwap(m, n); m = maxHolders.Load() {
					}
					time.Sleep(200 * time.Microsecond)
					holders.Add(-1)
					done.Add(1)
					if err := l.Release(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("worker: %v", err)
	}
	if got := maxHolders.Load(); got != 1 {
		t.Errorf("got %d concurrent holders at most, want 1", got)
	}
	if got := done.Load(); got != clients*workers*rounds {
		t.Errorf("got %d critical sections, want %d", got, clients*workers*rounds)
	}
	if contended.Load() == 0 {
		t.Errorf("got no contended attempt: the test did not exercise contention")
	}
}

func TestDo(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout)
	errBoom := errors.New("boom")

	t.Run("cancels fn at validity end", func(t *testing.T) {
		var cause, ctxErr error
		err := c.Do(ctx, "do-expire", 300*time.Millisecond, func(ctx context.Context) error {
			<-ctx.Done()
			cause, ctxErr = context.Cause(ctx), ctx.Err()
			return ctx.Err()
		})
		if !errors.Is(cause, redlock.ErrExpired) || !errors.Is(ctxErr, context.DeadlineExceeded) {
			t.Errorf("fn's context: got cause %v err %v, want ErrExpired and DeadlineExceeded", cause, ctxErr)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redlock.ErrExpired) {
			t.Errorf("Do: got %v, want fn's DeadlineExceeded joined with the release's ErrExpired", err)
		}
	})

	t.Run("auto-extends past the TTL, then expires", func(t *testing.T) {
		var alive, cause error
		err := c.Do(ctx, "do-extend", 400*time.Millisecond, func(ctx context.Context) error {
			time.Sleep(700 * time.Millisecond)
			alive = ctx.Err()
			<-ctx.Done()
			cause = context.Cause(ctx)
			return nil
		}, redlock.WithAutoExtend(100*time.Millisecond, 6))
		if alive != nil {
			t.Errorf("fn's context after 700ms with a 400ms TTL extended every 100ms: got %v, want alive", alive)
		}
		if !errors.Is(cause, redlock.ErrExpired) {
			t.Errorf("after the last extension: got cause %v, want ErrExpired", cause)
		}
		if !errors.Is(err, redlock.ErrExpired) {
			t.Errorf("Do: got %v, want ErrExpired from the release", err)
		}
	})

	t.Run("auto-extension that finds the lock lost cancels fn", func(t *testing.T) {
		var cause error
		err := c.Do(ctx, "do-lost", 10*time.Second, func(ctx context.Context) error {
			for _, n := range cl.Nodes {
				n.Client().Set(ctx, "do-lost", "other", time.Minute)
			}
			<-ctx.Done()
			cause = context.Cause(ctx)
			return nil
		}, redlock.WithAutoExtend(20*time.Millisecond, 100))
		if !errors.Is(cause, redlock.ErrNotHeld) {
			t.Errorf("fn's context: got cause %v, want ErrNotHeld", cause)
		}
		if !errors.Is(err, redlock.ErrNotHeld) {
			t.Errorf("Do: got %v, want ErrNotHeld from the release", err)
		}
	})

	t.Run("releases when fn fails", func(t *testing.T) {
		err := c.Do(ctx, "do-fail", 10*time.Second, func(context.Context) error { return errBoom })
		if !errors.Is(err, errBoom) {
			t.Fatalf("Do: got %v, want fn's error", err)
		}
		c2 := redlocktest.NewClient(t, cl.Addrs(), calmTimeout)
		l, err := c2.TryAcquire(ctx, "do-fail", time.Second)
		if err != nil {
			t.Fatalf("TryAcquire after Do: got %v, want the lock free", err)
		}
		l.Release(ctx)
	})

	t.Run("releases when ctx is cancelled", func(t *testing.T) {
		dctx, cancel := context.WithCancel(ctx)
		err := c.Do(dctx, "do-cancel", 10*time.Second, func(ctx context.Context) error {
			cancel()
			return ctx.Err()
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Do: got %v, want context.Canceled", err)
		}
		redlocktest.Eventually(t, 5*time.Second, "lock released with a fresh context", func() bool {
			return countEqual(redlocktest.Values(t, cl.Nodes, "do-cancel"), "") == len(cl.Nodes)
		})
	})
}

func TestValidityExhausted(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	// A drift allowance of the whole TTL leaves no validity for any quorum.
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout, redlock.WithDrift(1, 0))
	_, err := c.TryAcquire(testCtx(t), "exhausted", time.Second)
	if !errors.Is(err, redlock.ErrValidityExhausted) {
		t.Fatalf("got %v, want ErrValidityExhausted", err)
	}
	if ae := attemptError(t, err); ae.Last.Votes < c.Quorum() {
		t.Errorf("got %d votes, want a quorum (>= %d)", ae.Last.Votes, c.Quorum())
	}
	c.Close() // wait for the cleanup of the granted keys
	if got := redlocktest.Values(t, cl.Nodes, "exhausted"); countEqual(got, "") != len(got) {
		t.Errorf("after the failed attempt: got %q on the nodes, want the keys released", got)
	}
}

func TestContextErrorsStayVisible(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	holder := redlocktest.NewClient(t, cl.Addrs(), calmTimeout)
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout, redlock.WithBackoff(redlock.RandomBackoff(5*time.Millisecond, 10*time.Millisecond)))
	l, err := holder.Acquire(ctx, "ctx", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)

	t.Run("deadline", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := c.Acquire(dctx, "ctx", 30*time.Second)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redlock.ErrContended) {
			t.Fatalf("got %v, want DeadlineExceeded and ErrContended", err)
		}
		if ae := attemptError(t, err); ae.Attempts < 1 || ae.Last.Op != redlock.OpAcquire {
			t.Errorf("got %d attempts, op %v, want >= 1 acquire attempt", ae.Attempts, ae.Last.Op)
		}
	})
	t.Run("no deadline is bounded by the ttl", func(t *testing.T) {
		_, err := c.Acquire(context.Background(), "ctx", 200*time.Millisecond)
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redlock.ErrContended) {
			t.Fatalf("got %v, want DeadlineExceeded and ErrContended", err)
		}
	})
	t.Run("already cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := c.Acquire(cctx, "other-key", time.Second)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
		if ae := attemptError(t, err); ae.Attempts != 0 {
			t.Errorf("got %d attempts, want 0", ae.Attempts)
		}
	})
}

func TestCloseIsIdempotentAndFinal(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout)
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.TryAcquire(context.Background(), "closed", time.Second); !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("TryAcquire after Close: got %v, want ErrClosed", err)
	}
}

func TestPing(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout)
	for _, tc := range []struct {
		kill    int
		wantUp  int
		wantErr error
	}{{-1, 3, nil}, {0, 2, nil}, {1, 1, redlock.ErrUnavailable}} {
		if tc.kill >= 0 {
			cl.Nodes[tc.kill].Kill()
		}
		up, err := c.Ping(ctx)
		if up != tc.wantUp || !errors.Is(err, tc.wantErr) {
			t.Errorf("after killing node %d: got %d up, err %v; want %d, %v", tc.kill, up, err, tc.wantUp, tc.wantErr)
		}
	}
}

func TestObserverSeesEveryOperation(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	var mu sync.Mutex
	var events []redlock.Event
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout, redlock.WithObserver(redlock.ObserverFunc(func(e redlock.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	})))
	l, err := c.Acquire(ctx, "observed", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []redlock.Op{redlock.OpAcquire, redlock.OpExtend, redlock.OpRelease}
	if len(events) != len(want) {
		t.Fatalf("got %d events, want %d", len(events), len(want))
	}
	for i, e := range events {
		if e.Op != want[i] || e.Key != "observed" || e.Attempt != 1 || e.Quorum != 2 || e.Votes < 2 || e.Err != nil || len(e.Nodes) != 3 {
			t.Errorf("event %d: got %+v, want a successful %v on 3 nodes", i, e, want[i])
		}
		if hasValidity := e.Op != redlock.OpRelease; hasValidity != (e.Validity > 0) {
			t.Errorf("event %d (%v): got validity %v", i, e.Op, e.Validity)
		}
		for _, n := range e.Nodes {
			if n.Outcome != redlock.Granted && n.Outcome != redlock.Abandoned {
				t.Errorf("event %d node %d: got %v, want granted (or abandoned after the quorum)", i, n.Node, n.Outcome)
			}
		}
	}
}

func TestRandomBackoff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		b      redlock.Backoff
		lo, hi time.Duration
	}{
		{"range", redlock.RandomBackoff(time.Millisecond, 3*time.Millisecond), time.Millisecond, 3 * time.Millisecond},
		{"swapped", redlock.RandomBackoff(3*time.Millisecond, time.Millisecond), time.Millisecond, 3 * time.Millisecond},
		{"fixed", redlock.RandomBackoff(time.Millisecond, time.Millisecond), time.Millisecond, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for n := 1; n <= 200; n++ {
				wait, ok := tc.b(n)
				if !ok || wait < tc.lo || wait > tc.hi {
					t.Fatalf("retry %d: got %v, %v; want [%v, %v], true", n, wait, ok, tc.lo, tc.hi)
				}
			}
		})
	}
}

func TestExponentialBackoff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		b      redlock.Backoff
		n      int
		lo, hi time.Duration
	}{
		{"default first retry", redlock.DefaultBackoff, 1, 5 * time.Millisecond, 10 * time.Millisecond},
		{"default second retry", redlock.DefaultBackoff, 2, 10 * time.Millisecond, 20 * time.Millisecond},
		{"default fourth retry", redlock.DefaultBackoff, 4, 40 * time.Millisecond, 80 * time.Millisecond},
		{"default capped", redlock.DefaultBackoff, 10, 200 * time.Millisecond, 400 * time.Millisecond},
		{"no overflow far out", redlock.DefaultBackoff, 1000, 200 * time.Millisecond, 400 * time.Millisecond},
		{"cap below base", redlock.ExponentialBackoff(8*time.Millisecond, time.Millisecond), 3, 4 * time.Millisecond, 8 * time.Millisecond},
		{"zero base", redlock.ExponentialBackoff(0, 4*time.Millisecond), 2, time.Millisecond, 2 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < 200; i++ {
				wait, ok := tc.b(tc.n)
				if !ok || wait < tc.lo || wait > tc.hi {
					t.Fatalf("retry %d: got %v, %v; want [%v, %v], true", tc.n, wait, ok, tc.lo, tc.hi)
				}
			}
		})
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{redlock.Granted.String(), "granted"},
		{redlock.Taken.String(), "taken"},
		{redlock.Failed.String(), "error"},
		{redlock.TimedOut.String(), "timeout"},
		{redlock.Abandoned.String(), "abandoned"},
		{redlock.OpAcquire.String(), "acquire"},
		{redlock.OpRelease.String(), "release"},
		{redlock.OpExtend.String(), "extend"},
		{redlock.Info.String(), "info"},
		{redlock.Warning.String(), "warning"},
		{redlock.Critical.String(), "critical"},
		{redlock.BreakerClosed.String(), "closed"},
		{redlock.BreakerOpen.String(), "open"},
		{redlock.BreakerHalfOpen.String(), "half-open"},
		{redlock.BreakerState(0).String(), "breaker(0)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// acquireRecorder is an AcquireObserver that keeps what it is told.
type acquireRecorder struct {
	mu       sync.Mutex
	events   []redlock.Event
	acquires []redlock.AcquireResult
}

func (r *acquireRecorder) Observe(e redlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *acquireRecorder) ObserveAcquire(a redlock.AcquireResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acquires = append(r.acquires, a)
}

func TestAcquireObserverSumsUpEveryCall(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	rec := &acquireRecorder{}
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout, redlock.WithObserver(rec), redlock.WithMaxAttempts(3),
		redlock.WithBackoff(redlock.RandomBackoff(time.Millisecond, 2*time.Millisecond)))
	const ttl = 10 * time.Second

	held, err := c.Acquire(ctx, "summed", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "summed", ttl); !errors.Is(err, redlock.ErrContended) {
		t.Fatalf("second Acquire: got %v, want ErrContended", err)
	}
	if _, err := c.TryAcquire(ctx, "summed", ttl); !errors.Is(err, redlock.ErrContended) {
		t.Fatalf("TryAcquire: got %v, want ErrContended", err)
	}
	if _, err := c.Acquire(ctx, "", ttl); err == nil {
		t.Fatal("Acquire with an empty key: got no error")
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []struct {
		attempts int
		err      error
	}{{1, nil}, {3, redlock.ErrContended}, {1, redlock.ErrContended}}
	if len(rec.acquires) != len(want) {
		t.Fatalf("got %d AcquireResults, want %d (bad arguments are no acquire): %+v", len(rec.acquires), len(want), rec.acquires)
	}
	for i, w := range want {
		a := rec.acquires[i]
		if a.Key != "summed" || a.TTL != ttl || a.Attempts != w.attempts || !errors.Is(a.Err, w.err) || (a.Err == nil) != (w.err == nil) {
			t.Errorf("AcquireResult %d: got %+v, want %d attempts and error %v", i, a, w.attempts, w.err)
		}
		if granted := a.Err == nil; granted != (a.Validity > 0) || a.Validity > ttl || a.Elapsed <= 0 {
			t.Errorf("AcquireResult %d: got validity %v and elapsed %v, want a validity (0, %v] only when granted, and a positive elapsed", i, a.Validity, a.Elapsed, ttl)
		}
	}
	// 1 + 3 + 1 acquire attempts and one release, each with its TTL.
	if len(rec.events) != 6 {
		t.Fatalf("got %d events, want 6", len(rec.events))
	}
	for i, e := range rec.events {
		wantTTL := ttl
		if e.Op == redlock.OpRelease {
			wantTTL = 0
		}
		if e.TTL != wantTTL {
			t.Errorf("event %d (%v): got TTL %v, want %v", i, e.Op, e.TTL, wantTTL)
		}
	}
}

func TestExtendAfterExpiryIsObserved(t *testing.T) {
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	ctx := testCtx(t)
	rec := &acquireRecorder{}
	c := redlocktest.NewClient(t, cl.Addrs(), calmTimeout, redlock.WithObserver(rec))
	l, err := c.Acquire(ctx, "short", 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for l.Validity() > 0 {
		time.Sleep(time.Until(l.Deadline()) + time.Millisecond)
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrExpired) {
		t.Fatalf("Extend after expiry: got %v, want ErrExpired", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	last := rec.events[len(rec.events)-1]
	if last.Op != redlock.OpExtend || !errors.Is(last.Err, redlock.ErrExpired) || len(last.Nodes) != 0 || last.TTL != time.Second {
		t.Errorf("last event: got %+v, want an extend refused with ErrExpired, no node, TTL 1s", last)
	}
}

func TestObserversFansOut(t *testing.T) {
	if redlock.Observers() != nil || redlock.Observers(nil, nil) != nil {
		t.Error("Observers of nothing: want nil")
	}
	plain := redlock.ObserverFunc(func(redlock.Event) {})
	if _, ok := redlock.Observers(nil, plain).(redlock.ObserverFunc); !ok {
		t.Error("Observers of one observer: want that observer")
	}
	var seen int
	rec := &acquireRecorder{}
	o := redlock.Observers(redlock.ObserverFunc(func(redlock.Event) { seen++ }), nil, rec)
	o.Observe(redlock.Event{Op: redlock.OpRelease})
	a, ok := o.(redlock.AcquireObserver)
	if !ok {
		t.Fatal("Observers of two: want an AcquireObserver")
	}
	a.ObserveAcquire(redlock.AcquireResult{Key: "k", Attempts: 2})
	if seen != 1 || len(rec.events) != 1 || len(rec.acquires) != 1 || rec.acquires[0].Attempts != 2 {
		t.Errorf("got %d and %d events, %d acquire results; want 1, 1 and 1 (with 2 attempts)", seen, len(rec.events), len(rec.acquires))
	}
}

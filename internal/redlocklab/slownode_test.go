package redlocklab_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// slowSetup starts three nodes and puts a latency proxy in front of the last;
// the client talks to nodes 0 and 1 directly and to node 2 through the proxy.
func slowSetup(t *testing.T, latency, nodeTimeout time.Duration) (*redlocktest.Cluster, *redlock.Client, *[]redlock.Event) {
	t.Helper()
	cl := redlocktest.Start(t, 3, redlocktest.Options{})
	proxy := redistest.NewProxy(t, cl.Nodes[2].Addr)
	var (
		mu     sync.Mutex
		events []redlock.Event
	)
	obs := redlock.ObserverFunc(func(e redlock.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	})
	// No idle connections dialled in the background: one that completes
	// after the warm-up below would sit on top of the pool without its
	// HELLO, which the slow node answers too late, and the test's SET would
	// never be sent.
	noMinIdle := redlock.NodeOption(func(o *redis.Options) { o.MinIdleConns = 0 })
	nodes := redlock.NewNodes([]string{cl.Nodes[0].Addr, cl.Nodes[1].Addr, proxy.Addr}, redlock.WithNodeTimeout(nodeTimeout), noMinIdle)
	c, err := redlock.New(nodes, redlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		for _, n := range nodes {
			n.Close()
		}
	})
	// go-redis opens every connection with a HELLO round trip, which the
	// slow node answers too late, and drops a connection whose request timed
	// out. Open a few before the latency starts, as a busy client's pool
	// would have: the requests of the test then reach the server.
	warm := make([]*redis.Conn, 4)
	for i := range warm {
		warm[i] = nodes[2].Conn()
		if err := warm[i].Ping(context.Background()).Err(); err != nil {
			t.Fatalf("warm up: %v", err)
		}
	}
	for _, conn := range warm {
		conn.Close()
	}
	proxy.AddLatency(t, latency, 0)
	if err := cl.Nodes[2].Client().ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return cl, c, &events
}

func TestSlowNode(t *testing.T) {
	t.Run("won: slow node abandoned, its late key released", func(t *testing.T) {
		cl, c, events := slowSetup(t, time.Second, 200*time.Millisecond)
		ctx := testCtx(t)
		l, err := c.TryAcquire(ctx, "slow-won", 30*time.Second)
		if err != nil {
			t.Fatalf("TryAcquire: %v", err)
		}
		ev := (*events)[0]
		if got := ev.Nodes[2].Outcome; got != redlock.Abandoned && got != redlock.TimedOut {
			t.Errorf("slow node: got outcome %v, want abandoned or timeout", got)
		}
		if ev.Votes < 2 || ev.Err != nil || ev.Validity <= 0 {
			t.Errorf("got votes %d err %v validity %v, want a granted decision", ev.Votes, ev.Err, ev.Validity)
		}
		redlocktest.Eventually(t, 5*time.Second, "late SET landed on the slow node", func() bool {
			return redlocktest.Values(t, cl.Nodes[2:], "slow-won")[0] == l.Token()
		})
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		redlocktest.Eventually(t, 5*time.Second, "slow node's key released", func() bool {
			return redlocktest.Values(t, cl.Nodes[2:], "slow-won")[0] == ""
		})
	})

	t.Run("lost on timeout: late keys released", func(t *testing.T) {
		cl, c, events := slowSetup(t, time.Second, 200*time.Millisecond)
		ctx := testCtx(t)
		cl.Nodes[0].Client().Set(ctx, "slow-timeout", "other", time.Minute)
		_, err := c.TryAcquire(ctx, "slow-timeout", 30*time.Second)
		if !errors.Is(err, redlock.ErrUnavailable) {
			t.Fatalf("TryAcquire: got %v, want ErrUnavailable (one taken, one timed out)", err)
		}
		ev := (*events)[0]
		want := []redlock.Outcome{redlock.Taken, redlock.Granted, redlock.TimedOut}
		for i, w := range want {
			if got := ev.Nodes[i].Outcome; got != w {
				t.Errorf("node %d: got %v, want %v", i, got, w)
			}
		}
		redlocktest.Eventually(t, 5*time.Second, "keys of the failed attempt released", func() bool {
			got := redlocktest.Values(t, cl.Nodes, "slow-timeout")
			return got[0] == "other" && got[1] == "" && got[2] == "" && cl.Nodes[2].CommandCalls(t, "eval") >= 1
		})
		if got := cl.Nodes[2].CommandCalls(t, "set"); got != 1 {
			t.Errorf("slow node ran SET %d times, want 1 (the timed-out SET landed)", got)
		}
	})

	t.Run("lost before the slow node answered: its late OK is released", func(t *testing.T) {
		cl, c, events := slowSetup(t, 300*time.Millisecond, 2*time.Second)
		ctx := testCtx(t)
		cl.Nodes[0].Client().Set(ctx, "slow-late", "other", time.Minute)
		cl.Nodes[1].Client().Set(ctx, "slow-late", "other", time.Minute)
		_, err := c.TryAcquire(ctx, "slow-late", 30*time.Second)
		if !errors.Is(err, redlock.ErrContended) {
			t.Fatalf("TryAcquire: got %v, want ErrContended", err)
		}
		if got := (*events)[0].Nodes[2].Outcome; got != redlock.Abandoned {
			t.Errorf("slow node: got %v, want abandoned (decided on two taken votes)", got)
		}
		redlocktest.Eventually(t, 5*time.Second, "late key on the slow node released", func() bool {
			return redlocktest.Values(t, cl.Nodes[2:], "slow-late")[0] == "" && cl.Nodes[2].CommandCalls(t, "eval") >= 1
		})
		if got := cl.Nodes[2].CommandCalls(t, "set"); got != 1 {
			t.Errorf("slow node ran SET %d times, want 1", got)
		}
		if got := redlocktest.Values(t, cl.Nodes[:2], "slow-late"); got[0] != "other" || got[1] != "other" {
			t.Errorf("holder's keys: got %q, want untouched", got)
		}
	})
}

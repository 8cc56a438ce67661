package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// waitFor polls cond until it holds; a test deadline ends a wait that never
// would, with the condition's description.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWorkersReuseCapAndEnd: the node requests of a second round run on
// the goroutines of the first; a burst leaves at most maxIdle of them (one
// per pooled connection of every node); Close ends every one. Each round's
// requests wait at a gate until all of them have started, so no request
// can finish and hand its worker to another request of the same round.
func TestWorkersReuseCapAndEnd(t *testing.T) {
	var nodes []*redis.Client
	for range 3 {
		// Never dialled: the rounds below do not touch their node.
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", PoolSize: 1}))
	}
	c, err := New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	if c.workers.maxIdle != 3 {
		t.Fatalf("maxIdle %d, want 3 (pool size 1, 3 nodes)", c.workers.maxIdle)
	}
	ctx := context.Background()
	start := func(gate chan struct{}) *round {
		r, err := c.fanout(ctx, time.Minute, func(context.Context, *redis.Client, int) answer {
			<-gate
			return answer{outcome: Granted}
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	finish := func(r *round) {
		r.collect(ctx, c.quorum, false)
		r.decide(true)
	}
	count := func() (live, idle int) {
		c.workers.mu.Lock()
		defer c.workers.mu.Unlock()
		return c.workers.live, len(c.workers.idle)
	}
	settled := func(live, idle int) func() bool {
		return func() bool { l, i := count(); return l == live && i == idle }
	}

	gate := make(chan struct{})
	r := start(gate)
	if live, _ := count(); live != 3 {
		t.Fatalf("first round: %d workers, want 3", live)
	}
	close(gate)
	finish(r)
	waitFor(t, "the first round's 3 workers to idle", settled(3, 3))

	gate = make(chan struct{})
	r = start(gate)
	if live, idle := count(); live != 3 || idle != 0 {
		t.Errorf("second round: %d workers, %d idle; want the first round's 3, all busy", live, idle)
	}
	close(gate)
	finish(r)
	waitFor(t, "3 idle workers again", settled(3, 3))

	// Three rounds at once need nine workers; six end once they are done.
	gate = make(chan struct{})
	rs := []*round{start(gate), start(gate), start(gate)}
	if live, _ := count(); live != 9 {
		t.Errorf("three rounds in flight: %d workers, want 9", live)
	}
	close(gate)
	for _, r := range rs {
		finish(r)
	}
	waitFor(t, "the burst's workers past maxIdle to end", settled(3, 3))

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if live, idle := count(); live != 0 || idle != 0 {
		t.Errorf("after Close: %d workers, %d idle", live, idle)
	}
}

// TestDeadlinesShareASlot: rounds whose deadlines fall in one slot share a
// Done channel; it closes once the slot has passed, and the round's
// context then reports DeadlineExceeded, never before.
func TestDeadlinesShareASlot(t *testing.T) {
	var d deadlines
	now := time.Since(epoch)
	later := now + time.Hour
	slot := later.Truncate(deadlineSlot) + deadlineSlot/2
	if d.done(slot) != d.done(slot+deadlineSlot/4) {
		t.Error("two deadlines in one slot got different channels")
	}
	if d.done(slot) == d.done(slot+deadlineSlot) {
		t.Error("deadlines a slot apart share a channel")
	}
	far := roundCtx{Context: context.Background(), deadline: epoch.Add(slot), done: d.done(slot)}
	if err := far.Err(); err != nil {
		t.Errorf("an hour before its deadline: Err %v", err)
	}

	soon := now + 20*time.Millisecond
	rc := roundCtx{Context: context.WithValue(context.Background(), ctxKey{}, "v"), deadline: epoch.Add(soon), done: d.done(soon)}
	select {
	case <-rc.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done never closed")
	}
	if since := time.Since(epoch); since < soon {
		t.Errorf("Done closed %v before the deadline", soon-since)
	}
	if err := rc.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("after Done: Err %v, want DeadlineExceeded", err)
	}
	if dl, ok := rc.Deadline(); !ok || !dl.Equal(epoch.Add(soon)) {
		t.Errorf("Deadline %v %v, want %v", dl, ok, epoch.Add(soon))
	}
	if v := rc.Value(ctxKey{}); v != "v" {
		t.Errorf("Value %v: the caller's values must reach the requests", v)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.slots[int64((soon+deadlineSlot-1)/deadlineSlot)]; ok {
		t.Error("a closed slot is still kept")
	}
}

type ctxKey struct{}

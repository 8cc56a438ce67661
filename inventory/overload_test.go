package inventory

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/redlock"
)

// TestOverloadedHTTP: a replica whose lock nodes are saturated turns the
// excess of a burst away as "overloaded" (503, Retry-After 1), told apart
// from "unavailable" and "contended", and counted under its own outcome.
func TestOverloadedHTTP(t *testing.T) {
	cluster := startRedis(t, 3)
	var addrs []string
	for _, n := range cluster.Nodes {
		// Each node serves one request per 20 ms: the burst below queues
		// up behind it, more attempts than the lock client's limit.
		p := redistest.NewProxy(t, n.Addr)
		p.Saturate(t, 20*time.Millisecond)
		addrs = append(addrs, p.Addr)
	}
	ctx := context.Background()
	r, err := OpenReplica(ctx, ReplicaConfig{
		StoreDSN: "sqlite:" + filepath.Join(t.TempDir(), "inv.db"), Guard: GuardRedlock, Nodes: addrs,
		// An attempt over the client's limit waits in line while its round
		// could still finish: its acquire timeout less its nodes' request
		// timeout, here 0.1 s, then backs off and tries again until the
		// acquire timeout. The nodes pace the burst (every SET and every
		// release waits its 20 ms turn on each node), so serving it all
		// takes at least 4.8 s whatever the machine's speed: past the
		// 2.1 s acquire timeout, the rest is turned away. The node
		// timeout stays far above the nodes' queue, so that a starved
		// machine cannot make them unavailable.
		NodeTimeout: 2 * time.Second, AcquireTimeout: 2100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	const burst = 120
	for i := range burst {
		seed(t, r.Store(), fmt.Sprintf("sku-%d", i), 10)
	}
	h := newTestHandler(t, r.Service(), nil)

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		statuses = map[string]int{}
		retry    = map[string]string{}
	)
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := do(t, h, "POST", "/v1/reservations", jsonCT, fmt.Sprintf(`{"sku":"sku-%d","quantity":1,"request_id":"o-%d"}`, i, i))
			code := res.code()
			if res.status == 201 || res.status == 200 {
				code = "reserved"
			}
			mu.Lock()
			defer mu.Unlock()
			statuses[fmt.Sprintf("%d %s", res.status, code)]++
			retry[code] = res.header.Get("Retry-After")
		}()
	}
	wg.Wait()
	t.Logf("answers: %v", statuses)
	if statuses["503 overloaded"] == 0 {
		t.Errorf("got no 503 overloaded among %v, want the excess turned away", statuses)
	}
	if got := retry["overloaded"]; statuses["503 overloaded"] > 0 && got != "1" {
		t.Errorf("overloaded: got Retry-After %q, want 1", got)
	}
	for k, n := range statuses {
		if k != "503 overloaded" && k != "201 reserved" && k != "200 reserved" {
			t.Errorf("got %d answers %q, want only reserved and overloaded (nothing failed on the nodes)", n, k)
		}
	}
}

func TestOverloadedMapping(t *testing.T) {
	ctx := context.Background()
	lockErr := fmt.Errorf("acquire: %w", redlock.ErrOverloaded)
	err := redlockError(ctx, lockErr)
	if !errors.Is(err, ErrOverloaded) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrContended) {
		t.Errorf("redlockError(%v): got %v, want ErrOverloaded alone", lockErr, err)
	}
	if got := outcome(Reservation{}, &ReserveError{Err: err}); got != outcomeOverloaded {
		t.Errorf("outcome: got %q, want %q", got, outcomeOverloaded)
	}
	if ae := errorFor(&ReserveError{Err: err}); ae.Status != 503 || ae.Code != "overloaded" || ae.RetryAfter != 1 {
		t.Errorf("errorFor: got %d %q Retry-After %d, want 503 overloaded with Retry-After 1", ae.Status, ae.Code, ae.RetryAfter)
	}
}

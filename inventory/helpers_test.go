package inventory

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9/logging"

	"github.com/redlocklab/redlocklab/internal/pgtest"
	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

func TestMain(m *testing.M) {
	// go-redis would log every dial failure to nodes a test killed on
	// purpose; the tests assert on errors instead.
	logging.Disable()
	os.Exit(m.Run())
}

// forEachStore runs fn once against a fresh SQLite file and once against a
// fresh Postgres schema.
func forEachStore(t *testing.T, fn func(t *testing.T, dsn string)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		fn(t, "sqlite:"+filepath.Join(t.TempDir(), "inventory.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		fn(t, pgtest.DSN(t))
	})
}

func openStore(t *testing.T, dsn string) *Store {
	t.Helper()
	s, err := OpenStore(context.Background(), dsn)
	if err != nil {
		t.Fatalf("OpenStore(%s): %v", RedactDSN(dsn), err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func seed(t *testing.T, s *Store, sku string, stock int64) {
	t.Helper()
	if err := s.Seed(context.Background(), sku, stock); err != nil {
		t.Fatalf("Seed(%s, %d): %v", sku, stock, err)
	}
}

func audit(t *testing.T, s *Store, sku string, initial int64) SKUAudit {
	t.Helper()
	a, err := s.Audit(context.Background(), []string{sku}, map[string]int64{sku: initial})
	if err != nil {
		t.Fatalf("Audit(%s): %v", sku, err)
	}
	return a.PerSKU[sku]
}

// startRedis starts n independent redis-server nodes.
func startRedis(t *testing.T, n int) *redlocktest.Cluster {
	t.Helper()
	return redlocktest.Start(t, n, redlocktest.Options{})
}

// replica is one Service with its own node clients and Redlock client, as a
// separate process would have.
func replica(t *testing.T, store *Store, guard Guard, c *redlocktest.Cluster, opts ...ServiceOption) *Service {
	t.Helper()
	var locker *redlock.Client
	if c != nil {
		// Generous node timeouts: the tests share two loaded cores, and a
		// timed-out vote is not what they are about.
		nodes := redlock.NewNodes(c.Addrs(), redlock.WithNodeTimeout(500*time.Millisecond))
		t.Cleanup(func() {
			for _, n := range nodes {
				n.Close()
			}
		})
		if guard.redlock() {
			var err error
			locker, err = redlock.New(nodes, redlock.WithBackoff(redlock.RandomBackoff(time.Millisecond, 10*time.Millisecond)))
			if err != nil {
				t.Fatalf("redlock.New: %v", err)
			}
			t.Cleanup(func() { locker.Close() })
		}
		switch guard {
		case GuardRedisSingle:
			opts = append([]ServiceOption{WithSingleNode(nodes[0])}, opts...)
		case GuardRedlockDel:
			opts = append([]ServiceOption{WithDeleteNodes(nodes)}, opts...)
		case GuardRedsync:
			// As redsync's users build them: go-redis's defaults.
			plain := redsyncNodes(ReplicaConfig{Nodes: c.Addrs()})
			t.Cleanup(func() {
				for _, n := range plain {
					n.Close()
				}
			})
			opts = append([]ServiceOption{WithRedsyncNodes(plain)}, opts...)
		}
	}
	s, err := NewService(store, guard, locker, opts...)
	if err != nil {
		t.Fatalf("NewService(%s): %v", guard, err)
	}
	return s
}

// gate is a PauseHook the test drives: a request whose ID was blocked stops
// in the critical section, reports that it got there, and waits to be let go.
type gate struct {
	mu    sync.Mutex
	steps map[string]*gateStep
}

type gateStep struct {
	reached, release chan struct{}
	once, reachOnce  sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{steps: map[string]*gateStep{}}
	t.Cleanup(g.releaseAll) // never leave a request parked
	return g
}

// block makes the request with this ID stop in the critical section.
func (g *gate) block(requestID string) *gateStep {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := &gateStep{reached: make(chan struct{}), release: make(chan struct{})}
	g.steps[requestID] = st
	return st
}

func (st *gateStep) let() { st.once.Do(func() { close(st.release) }) }

func (g *gate) releaseAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, st := range g.steps {
		st.let()
	}
}

func (g *gate) hook(ctx context.Context, req Request) {
	g.mu.Lock()
	st := g.steps[req.RequestID]
	g.mu.Unlock()
	if st == nil {
		return
	}
	// A guard that retries (db-version) comes here once per try; the
	// first arrival is the one a test waits for.
	st.reachOnce.Do(func() { close(st.reached) })
	select {
	case <-st.release:
	case <-ctx.Done():
	}
}

// wait blocks until the step's request reached the gate, or fails the test
// when the request returned instead (res) or never got there.
func (st *gateStep) wait(t *testing.T, what string, res <-chan result) {
	t.Helper()
	select {
	case <-st.reached:
	case r := <-res:
		t.Fatalf("%s returned (%+v, %v) before reaching the critical section", what, r.r, r.err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never reached the critical section", what)
	}
}

// result is one Reserve call's outcome, delivered on a channel.
type result struct {
	r   Reservation
	err error
}

func reserveAsync(s *Service, req Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		r, err := s.Reserve(context.Background(), req)
		ch <- result{r, err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan result, what string) result {
	t.Helper()
	select {
	case res := <-ch:
		return res
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return", what)
		return result{}
	}
}

// newTestHandler is NewHandler for a test, which fails when the metrics cannot be
// registered.
func newTestHandler(t testing.TB, s *Service, reg prometheus.Registerer, opts ...HandlerOption) http.Handler {
	t.Helper()
	h, err := NewHandler(s, reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

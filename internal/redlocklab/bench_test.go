package redlocklab_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// benchTTL is redsync's default expiry, so both libraries lock for as long.
const benchTTL = 8 * time.Second

// BenchmarkLock compares, on the five shared nodes, one Acquire+Release per
// iteration of: the single-node floor (SET NX PX + compare-and-delete on one
// node), this package, and go-redsync/redsync v4 with its defaults and with
// WithFailFast(true). Each runs healthy, with node 4 behind a 20 ms latency
// proxy ("slow") and with node 4 down ("down"). Keys are unique per
// iteration, so there is no contention. Besides ns/op it reports the p50 and
// p99 of the acquire step alone ("p50-ns", "p99-ns") and the p99 of one
// whole lock+unlock, as a caller of either library waits for it
// ("cycle-p99-ns"). Pipe the output to
// `go run ./internal/redlocklab/benchtable` for the comparison table.
func BenchmarkLock(b *testing.B) {
	if len(sharedAddrs) < 5 {
		b.Skip("no shared nodes")
	}
	healthy := sharedAddrs[:5]
	for _, sc := range []struct {
		name  string
		addrs func(b *testing.B) []string
	}{
		{"healthy", func(*testing.B) []string { return healthy }},
		{"slow", func(b *testing.B) []string {
			p := redistest.NewProxy(b, healthy[4])
			p.AddLatency(b, 20*time.Millisecond, 0)
			return append(slices.Clone(healthy[:4]), p.Addr)
		}},
		{"down", func(b *testing.B) []string {
			return append(slices.Clone(healthy[:4]), fmt.Sprintf("127.0.0.1:%d", redlocktest.FreePort(b)))
		}},
	} {
		b.Run(sc.name, func(b *testing.B) {
			addrs := sc.addrs(b)
			if sc.name == "healthy" {
				b.Run("floor", func(b *testing.B) { benchFloor(b, addrs[0]) })
			}
			b.Run("redlock", func(b *testing.B) { benchRedlock(b, addrs) })
			b.Run("redsync", func(b *testing.B) { benchRedsync(b, addrs) })
			b.Run("redsync-failfast", func(b *testing.B) { benchRedsync(b, addrs, redsync.WithFailFast(true)) })
		})
	}
}

// keys returns n keys unique to this benchmark run, built before the timer.
func keys(b *testing.B, n int) []string {
	out := make([]string, n)
	prefix := fmt.Sprintf("bench:%s:%d:", b.Name(), time.Now().UnixNano())
	for i := range out {
		out[i] = prefix + fmt.Sprint(i)
	}
	return out
}

// benchNodeTimeout replaces the 50 ms default: the benchmark machine is
// shared, and a scheduling stall must not turn into a failed iteration. It is
// far above the 20 ms proxy latency either way.
const benchNodeTimeout = 500 * time.Millisecond

func nodes(b *testing.B, addrs []string) []*redis.Client {
	ns := redlock.NewNodes(addrs, redlock.WithNodeTimeout(benchNodeTimeout))
	b.Cleanup(func() {
		for _, n := range ns {
			n.Close()
		}
	})
	return ns
}

// latencies collects, per iteration, the acquire step and the whole
// acquire+release cycle.
type latencies struct{ acquire, cycle []time.Duration }

func newLatencies(n int) *latencies {
	return &latencies{acquire: make([]time.Duration, 0, n), cycle: make([]time.Duration, 0, n)}
}

// add records one iteration that started at t0 and acquired at acquired.
func (l *latencies) add(t0, acquired time.Time) {
	l.acquire = append(l.acquire, acquired.Sub(t0))
	l.cycle = append(l.cycle, time.Since(t0))
}

func (l *latencies) report(b *testing.B) {
	if len(l.acquire) == 0 {
		return
	}
	b.ReportMetric(quantile(l.acquire, 0.50), "p50-ns")
	b.ReportMetric(quantile(l.acquire, 0.99), "p99-ns")
	b.ReportMetric(quantile(l.cycle, 0.99), "cycle-p99-ns")
}

// quantile sorts d and returns its q quantile in nanoseconds.
func quantile(d []time.Duration, q float64) float64 {
	slices.Sort(d)
	return float64(d[int(q*float64(len(d)-1))].Nanoseconds())
}

const warmup = 50

var floorRelease = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

func benchFloor(b *testing.B, addr string) {
	ctx := context.Background()
	node := nodes(b, []string{addr})[0]
	const token = "0123456789abcdef0123456789abcdef"
	ks := keys(b, b.N+warmup)
	lat := newLatencies(b.N)
	for i := range ks {
		if i == warmup {
			b.ResetTimer()
		}
		t0 := time.Now()
		ok, err := node.SetNX(ctx, ks[i], token, benchTTL).Result()
		if err != nil || !ok {
			b.Fatalf("SET NX: %v %v", ok, err)
		}
		acquired := time.Now()
		if err := floorRelease.Run(ctx, node, []string{ks[i]}, token).Err(); err != nil {
			b.Fatalf("release: %v", err)
		}
		if i >= warmup {
			lat.add(t0, acquired)
		}
	}
	b.StopTimer()
	lat.report(b)
}

func benchRedlock(b *testing.B, addrs []string) {
	ctx := context.Background()
	c, err := redlock.New(nodes(b, addrs))
	if err != nil {
		b.Fatal(err)
	}
	ks := keys(b, b.N+warmup)
	lat := newLatencies(b.N)
	for i := range ks {
		if i == warmup {
			b.ResetTimer()
		}
		t0 := time.Now()
		l, err := c.Acquire(ctx, ks[i], benchTTL)
		if err != nil {
			b.Fatalf("Acquire: %v", err)
		}
		acquired := time.Now()
		if err := l.Release(ctx); err != nil {
			b.Fatalf("Release: %v", err)
		}
		if i >= warmup {
			lat.add(t0, acquired)
		}
	}
	b.StopTimer()
	c.Close() // background cleanup on the slow node, outside the timing
	lat.report(b)
}

func benchRedsync(b *testing.B, addrs []string, opts ...redsync.Option) {
	ctx := context.Background()
	var pools []redsyncredis.Pool
	for _, n := range nodes(b, addrs) {
		pools = append(pools, goredis.NewPool(n))
	}
	rs := redsync.New(pools...)
	ks := keys(b, b.N+warmup)
	lat := newLatencies(b.N)
	for i := range ks {
		if i == warmup {
			b.ResetTimer()
		}
		m := rs.NewMutex(ks[i], opts...)
		t0 := time.Now()
		if err := m.LockContext(ctx); err != nil {
			b.Fatalf("Lock: %v", err)
		}
		acquired := time.Now()
		if ok, err := m.UnlockContext(ctx); !ok {
			b.Fatalf("Unlock: %v %v", ok, err)
		}
		if i >= warmup {
			lat.add(t0, acquired)
		}
	}
	b.StopTimer()
	lat.report(b)
}

// BenchmarkSaturated offers a node set that serves a fixed number of
// requests per second (three nodes behind fronts that each serve one request
// per 4 ms, the model of saturated CPUs; see saturated) its capacity, then
// three and eight times it, open loop, for a few seconds each, with the
// default overload control. It reports goodput ("granted/s": lock+unlock
// pairs that succeeded per second) and, past capacity, goodput as a share of
// what the run at capacity achieved ("share-of-1x"). Without the overload
// control, a load past capacity is metastable: timeouts feed retries and
// cleanups, and goodput falls to a fraction. The load does not depend on
// b.N; run it with -benchtime 1x.
func BenchmarkSaturated(b *testing.B) {
	const (
		service     = 4 * time.Millisecond
		capacity    = 100 // lock+unlock pairs per second, a little under the nodes' 125
		nodeTimeout = 50 * time.Millisecond
		runFor      = 5 * time.Second
	)
	addrs, _ := saturated(b, 3, service)
	var atCapacity float64
	for _, x := range []int{1, 3, 8} {
		b.Run(fmt.Sprintf("%dx", x), func(b *testing.B) {
			c := redlocktest.NewClient(b, addrs, nodeTimeout)
			rate := capacity * x
			granted := offer(b, c, rate, runFor)
			goodput := float64(granted) / runFor.Seconds()
			b.ReportMetric(goodput, "granted/s")
			if x == 1 {
				atCapacity = goodput
			} else if atCapacity > 0 {
				b.ReportMetric(goodput/atCapacity, "share-of-1x")
			}
		})
	}
}

// offer calls Acquire then Release on c at rate per second for d, each call
// on a key of its own with a second to succeed, and returns how many
// succeeded.
func offer(b *testing.B, c *redlock.Client, rate int, d time.Duration) int64 {
	ctx := context.Background()
	var (
		granted atomic.Int64
		wg      sync.WaitGroup
	)
	prefix := fmt.Sprintf("saturated:%s:%d:", b.Name(), time.Now().UnixNano())
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := range int(d.Seconds() * float64(rate)) {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			l, err := c.Acquire(actx, prefix+strconv.Itoa(i), 10*time.Second)
			if err == nil && l.Release(ctx) == nil {
				granted.Add(1)
			}
		}()
	}
	wg.Wait()
	return granted.Load()
}

// BenchmarkInterleaved measures one whole lock+unlock, sequentially, for
// the quorum fan-out floor (see quorumFloor), this package and redsync
// WithFailFast(true), which also decides at quorum. The three take turns
// iteration by iteration, so that whatever else the machine does falls on
// all of them alike, on five nodes of their own with appendfsync no: the
// disk's fsyncs would otherwise be most of the time and all of the tail,
// and they are not the client's. Scenarios: all nodes healthy, and node 4
// behind a 20 ms latency proxy ("slow"). Each of b.N iterations is one
// lock+unlock of each. It reports each one's p50 and p99 ("redlock-p50-ns",
// "failfast-p99-ns", …) and this package's ratios to the others in the
// same run ("vs-floor-p50", "vs-failfast-p50", "vs-failfast-p99": below 1,
// ours is shorter); with -count, benchtable takes their medians over the
// rounds.
func BenchmarkInterleaved(b *testing.B) {
	for _, slow := range []bool{false, true} {
		name := "healthy"
		if slow {
			name = "slow"
		}
		b.Run(name, func(b *testing.B) { benchInterleaved(b, slow) })
	}
}

func benchInterleaved(b *testing.B, slow bool) {
	cl := redlocktest.Start(b, 5, redlocktest.Options{AppendFsync: "no"})
	addrs := cl.Addrs()
	if slow {
		p := redistest.NewProxy(b, addrs[4])
		p.AddLatency(b, 20*time.Millisecond, 0)
		addrs[4] = p.Addr
	}
	ctx := context.Background()
	c, err := redlock.New(nodes(b, addrs))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var pools []redsyncredis.Pool
	for _, n := range nodes(b, addrs) {
		pools = append(pools, goredis.NewPool(n))
	}
	rs := redsync.New(pools...)
	floor := newQuorumFloor(nodes(b, addrs))
	defer floor.wait()
	contenders := []struct {
		name  string
		cycle func(key string) error
		lat   []time.Duration
	}{
		{name: "redlock", cycle: func(key string) error {
			l, err := c.Acquire(ctx, key, benchTTL)
			if err != nil {
				return fmt.Errorf("Acquire: %w", err)
			}
			return l.Release(ctx)
		}},
		{name: "failfast", cycle: func(key string) error {
			m := rs.NewMutex(key, redsync.WithFailFast(true))
			if err := m.LockContext(ctx); err != nil {
				return fmt.Errorf("Lock: %w", err)
			}
			if ok, err := m.UnlockContext(ctx); !ok {
				return fmt.Errorf("Unlock: %v", err)
			}
			return nil
		}},
		{name: "floor", cycle: func(key string) error { return floor.cycle(ctx, key) }},
	}
	n := len(contenders)
	ks := keys(b, n*(b.N+warmup))
	b.ResetTimer()
	for i := range b.N + warmup {
		// Each takes its turn first, second and last alike.
		for j := range n {
			k := (i + j) % n
			t0 := time.Now()
			if err := contenders[k].cycle(ks[n*i+k]); err != nil {
				b.Fatalf("%s: %v", contenders[k].name, err)
			}
			if i >= warmup {
				contenders[k].lat = append(contenders[k].lat, time.Since(t0))
			}
		}
	}
	b.StopTimer()
	q := map[string][2]float64{}
	for _, ct := range contenders {
		q[ct.name] = [2]float64{quantile(ct.lat, 0.50), quantile(ct.lat, 0.99)}
		b.ReportMetric(q[ct.name][0], ct.name+"-p50-ns")
		b.ReportMetric(q[ct.name][1], ct.name+"-p99-ns")
	}
	b.ReportMetric(q["redlock"][0]/q["floor"][0], "vs-floor-p50")
	b.ReportMetric(q["redlock"][0]/q["failfast"][0], "vs-failfast-p50")
	b.ReportMetric(q["redlock"][1]/q["failfast"][1], "vs-failfast-p99")
}

// quorumFloor is the least a Redlock over the nodes must do, as a caller
// waits for it: SET NX PX on every node in parallel, then compare-and-delete
// on every node in parallel, each step decided as soon as a quorum agreed
// or can no longer agree. The requests still out when a step is decided
// end in the background; wait waits for them.
type quorumFloor struct {
	nodes  []*redis.Client
	quorum int
	token  string
	bg     sync.WaitGroup
}

func newQuorumFloor(nodes []*redis.Client) *quorumFloor {
	return &quorumFloor{nodes: nodes, quorum: len(nodes)/2 + 1, token: fmt.Sprintf("floor-%d", time.Now().UnixNano())}
}

func (f *quorumFloor) cycle(ctx context.Context, key string) error {
	if !f.step(func(n *redis.Client) bool {
		ok, err := n.SetNX(ctx, key, f.token, benchTTL).Result()
		return err == nil && ok
	}) {
		return fmt.Errorf("floor: no quorum for %q", key)
	}
	keys := []string{key}
	if !f.step(func(n *redis.Client) bool { return floorRelease.Run(ctx, n, keys, f.token).Err() == nil }) {
		return fmt.Errorf("floor: no quorum deleting %q", key)
	}
	return nil
}

// step runs op on every node and reports whether a quorum said yes.
func (f *quorumFloor) step(op func(*redis.Client) bool) bool {
	votes := make(chan bool, len(f.nodes))
	for _, n := range f.nodes {
		f.bg.Add(1)
		go func() {
			defer f.bg.Done()
			votes <- op(n)
		}()
	}
	yes, no := 0, 0
	for yes < f.quorum && no <= len(f.nodes)-f.quorum {
		if <-votes {
			yes++
		} else {
			no++
		}
	}
	return yes >= f.quorum
}

func (f *quorumFloor) wait() { f.bg.Wait() }

// BenchmarkClosedLoop runs a worker pool in a closed loop, each worker
// locking and unlocking one key after the other, on the five shared nodes:
// 1, 16, 64 and 256 workers on keys of their own ("distinct-N"), and 64
// workers sharing 8 hot keys ("hot8-64", where waiting for a held key is
// part of the cycle). Implementations: the raw five-node fan-out floor
// (SET NX PX on every node in parallel, then compare-and-delete on every
// node; on contention it releases what it got and backs off as this
// package does), this package, go-redsync with its defaults and with
// WithFailFast(true). Every implementation runs on go-redis clients from
// NewNodes with its default timeouts and a pool per node as large as the
// worker pool (at least go-redis's default). b.N is the number of cycles
// of all workers together. It reports successful cycles per second
// ("locks/s"), the p50 and p99 of one whole lock+unlock as a worker waits
// for it ("p50-ns", "p99-ns"), and the cycles that failed ("errors").
// Pipe the output to `go run ./internal/redlocklab/benchtable`.
func BenchmarkClosedLoop(b *testing.B) {
	if len(sharedAddrs) < 5 {
		b.Skip("no shared nodes")
	}
	for _, sc := range []struct {
		name    string
		workers int
		hot     int // keys shared by all workers; 0: a fresh key per cycle
	}{
		{"distinct-1", 1, 0},
		{"distinct-16", 16, 0},
		{"distinct-64", 64, 0},
		{"distinct-256", 256, 0},
		{"hot8-64", 64, 8},
	} {
		b.Run(sc.name, func(b *testing.B) {
			for _, impl := range []struct {
				name string
				new  func(b *testing.B, nodes []*redis.Client) cycler
			}{
				{"fanout", newFanoutCycler},
				{"redlock", newRedlockCycler},
				{"redsync", func(b *testing.B, nodes []*redis.Client) cycler { return newRedsyncCycler(nodes) }},
				{"redsync-failfast", func(b *testing.B, nodes []*redis.Client) cycler {
					return newRedsyncCycler(nodes, redsync.WithFailFast(true))
				}},
			} {
				b.Run(impl.name, func(b *testing.B) {
					nodes := redlock.NewNodes(sharedAddrs[:5], redlock.WithPoolSize(max(sc.workers, 10*runtime.GOMAXPROCS(0))))
					b.Cleanup(func() {
						for _, n := range nodes {
							n.Close()
						}
					})
					benchClosedLoop(b, sc.workers, sc.hot, impl.new(b, nodes))
				})
			}
		})
	}
}

// cycler locks key, unlocks it, and says why when either failed.
type cycler func(ctx context.Context, key string) error

func benchClosedLoop(b *testing.B, workers, hot int, cycle cycler) {
	ctx := context.Background()
	var ks []string
	if hot > 0 {
		ks = keys(b, hot)
	} else {
		ks = keys(b, b.N)
	}
	b.ResetTimer()
	t0 := time.Now()
	lat, errs := closedLoop(workers, b.N, func(_, i int) error { return cycle(ctx, ks[i%len(ks)]) })
	elapsed := time.Since(t0)
	b.StopTimer()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "locks/s")
	b.ReportMetric(float64(len(errs)), "errors")
	if len(all) > 0 {
		b.ReportMetric(quantile(all, 0.50), "p50-ns")
		b.ReportMetric(quantile(all, 0.99), "p99-ns")
	}
	if len(errs) > 0 {
		b.Logf("%d of %d cycles failed; first: %v", len(errs), b.N, errs[0])
	}
}

// closedLoop runs n cycles on workers goroutines, each taking the next
// cycle as soon as its last one ended, and returns, per worker, how long
// each of its successful cycles took, and the errors of those that failed.
func closedLoop(workers, n int, cycle func(worker, i int) error) ([][]time.Duration, []error) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	lat := make([][]time.Duration, workers)
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := cycle(w, i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	close(start)
	wg.Wait()
	return lat, errs
}

func newRedlockCycler(b *testing.B, nodes []*redis.Client) cycler {
	c, err := redlock.New(nodes)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return func(ctx context.Context, key string) error {
		l, err := c.Acquire(ctx, key, benchTTL)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
}

func newRedsyncCycler(nodes []*redis.Client, opts ...redsync.Option) cycler {
	var pools []redsyncredis.Pool
	for _, n := range nodes {
		pools = append(pools, goredis.NewPool(n))
	}
	rs := redsync.New(pools...)
	return func(ctx context.Context, key string) error {
		m := rs.NewMutex(key, opts...)
		if err := m.LockContext(ctx); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if ok, err := m.UnlockContext(ctx); !ok {
			return fmt.Errorf("unlock: %v", err)
		}
		return nil
	}
}

// newFanoutCycler is the least a Redlock over the nodes must do: one SET NX
// PX to every node in parallel, waiting for all of them, then one
// compare-and-delete to every node, in parallel (a SET that timed out on
// the client may have landed). Without a quorum it releases the same way
// and retries after DefaultBackoff.
func newFanoutCycler(b *testing.B, nodes []*redis.Client) cycler {
	quorum := len(nodes)/2 + 1
	var seq atomic.Int64
	prefix := fmt.Sprintf("fanout-%d-", time.Now().UnixNano())
	parallel := func(f func(i int)) {
		var wg sync.WaitGroup
		for i := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f(i)
			}()
		}
		wg.Wait()
	}
	return func(ctx context.Context, key string) error {
		token := prefix + strconv.FormatInt(seq.Add(1), 10)
		keys := []string{key}
		for n := 1; ; n++ {
			var votes atomic.Int32
			parallel(func(i int) {
				if ok, err := nodes[i].SetNX(ctx, key, token, benchTTL).Result(); err == nil && ok {
					votes.Add(1)
				}
			})
			parallel(func(i int) { floorRelease.Run(ctx, nodes[i], keys, token) })
			if int(votes.Load()) >= quorum {
				return nil
			}
			if n == 100 {
				return fmt.Errorf("fanout: %q: no quorum after %d tries", key, n)
			}
			wait, _ := redlock.DefaultBackoff(n)
			time.Sleep(wait)
		}
	}
}

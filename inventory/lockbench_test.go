package inventory

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/etcdtest"
	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// BenchmarkLockAcquire compares what the lock costs one uncontended
// reservation: Redlock on three Redis nodes against etcd's mutex on one and
// on three members (etcd fsyncs every lock key it writes; Redis, in the
// harness, does not). It reports the median and p99 of Timing.Acquire and
// Timing.Release; ns/op is the whole reservation, SQLite included.
func BenchmarkLockAcquire(b *testing.B) {
	ctx := context.Background()
	redis := redlocktest.Start(b, 3, redlocktest.Options{})
	etcd1 := etcdtest.Start(b, 1, etcdtest.Options{})
	etcd3 := etcdtest.Start(b, 3, etcdtest.Options{})
	for _, tc := range []struct {
		name  string
		guard Guard
		opts  func() []ServiceOption
		lock  func() *redlock.Client
	}{
		{"redlock-3", GuardRedlock, nil, func() *redlock.Client {
			l, err := redlock.New(redlock.NewNodes(redis.Addrs()))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			return l
		}},
		{"etcd-1", GuardEtcd, func() []ServiceOption { return []ServiceOption{WithEtcd(etcd1.Client())} }, nil},
		{"etcd-3", GuardEtcd, func() []ServiceOption { return []ServiceOption{WithEtcd(etcd3.Client())} }, nil},
	} {
		b.Run(tc.name, func(b *testing.B) {
			store, err := OpenStore(ctx, "sqlite:"+filepath.Join(b.TempDir(), "inv.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			var opts []ServiceOption
			var l *redlock.Client
			if tc.opts != nil {
				opts = tc.opts()
			}
			if tc.lock != nil {
				l = tc.lock()
			}
			svc, err := NewService(store, tc.guard, l, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer svc.Close()
			skus := make([]string, 64)
			for i := range skus {
				skus[i] = fmt.Sprintf("bench-%d", i)
			}
			if err := store.SeedMany(ctx, skus, MaxStock); err != nil {
				b.Fatal(err)
			}
			var acquire, release []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r, err := svc.Reserve(ctx, Request{SKU: skus[i%len(skus)], Quantity: 1, RequestID: fmt.Sprintf("%s-%d", tc.name, i)})
				if err != nil {
					b.Fatal(err)
				}
				acquire, release = append(acquire, r.Timing.Acquire), append(release, r.Timing.Release)
			}
			b.StopTimer()
			for _, m := range []struct {
				name string
				d    []time.Duration
			}{{"acquire", acquire}, {"release", release}} {
				slices.Sort(m.d)
				b.ReportMetric(float64(m.d[len(m.d)/2].Microseconds()), m.name+"-p50-µs")
				b.ReportMetric(float64(m.d[len(m.d)*99/100].Microseconds()), m.name+"-p99-µs")
			}
		})
	}
}

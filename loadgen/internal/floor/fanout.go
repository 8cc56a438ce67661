package floor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// FanoutTTL is the lock's TTL in each cycle's SET; every cycle deletes its
// key again, so it only bounds what a failed release leaves behind.
const FanoutTTL = 10 * time.Second

// Fanout is one measurement of the fan-out floor: Workers goroutines each
// locking and unlocking fresh keys on every node, back to back, for
// DurationS seconds.
type Fanout struct {
	Nodes      int     `json:"nodes"`
	Workers    int     `json:"workers"`
	Cycles     int64   `json:"cycles"` // lock+unlock cycles that reached a quorum
	Errors     int64   `json:"errors"` // cycles that did not
	FirstError string  `json:"first_error,omitempty"`
	DurationS  float64 `json:"duration_s"`
	LocksPerS  float64 `json:"locks_per_s"` // Cycles per second
}

// compareAndDelete is a Redlock release: the key goes only while it holds
// the token (a SET that timed out on the client may still have landed).
var compareAndDelete = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// MeasureFanout runs the least a Redlock over nodes must do, closed loop on
// workers goroutines for d: one SET key token NX PX FanoutTTL to every node
// in parallel, waiting for them all, then one compare-and-delete to every
// node in parallel. Each cycle takes a key no cycle used before, so none
// waits for another; one without a quorum of SETs is an error, not
// retried. Every worker runs at least one cycle; those running when d is
// up finish and count.
func MeasureFanout(ctx context.Context, nodes []*redis.Client, workers int, d time.Duration) (Fanout, error) {
	if len(nodes) == 0 || workers < 1 || d <= 0 {
		return Fanout{}, fmt.Errorf("floor: fan-out: %d nodes, %d workers for %v: want at least one node and one worker for a while", len(nodes), workers, d)
	}
	quorum := len(nodes)/2 + 1
	// Under "lock:", the only keys the lab's redlock user may touch.
	prefix := fmt.Sprintf("lock:floor-%d-", time.Now().UnixNano())
	var (
		seq            atomic.Int64
		cycles, failed atomic.Int64
		mu             sync.Mutex
		first          error
	)
	cycle := func() error {
		key := prefix + strconv.FormatInt(seq.Add(1), 10)
		if n, err := lockUnlock(ctx, nodes, key); n < quorum {
			if err == nil {
				err = errors.New("the others found the key set")
			}
			return fmt.Errorf("%s: %d of %d SETs, want %d: %w", key, n, len(nodes), quorum, err)
		}
		return nil
	}

	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := cycle(); err != nil {
					failed.Add(1)
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				} else {
					cycles.Add(1)
				}
				if !time.Now().Before(stop) {
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return Fanout{}, fmt.Errorf("floor: fan-out: %w", err)
	}
	f := Fanout{Nodes: len(nodes), Workers: workers, Cycles: cycles.Load(), Errors: failed.Load(),
		DurationS: elapsed.Seconds(), LocksPerS: float64(cycles.Load()) / elapsed.Seconds()}
	if first != nil {
		f.FirstError = first.Error()
	}
	if f.Cycles == 0 {
		return f, fmt.Errorf("floor: fan-out: no cycle reached a quorum; the first said %w", first)
	}
	return f, nil
}

// lockUnlock is the least a Redlock lock and unlock do: SET key NX PX
// FanoutTTL to every node in parallel, waiting for them all, then the
// compare-and-delete to every node in parallel. The key is its own token
// (unique, which is all a token must be here). It returns how many SETs
// granted, and the nodes' errors.
func lockUnlock(ctx context.Context, nodes []*redis.Client, key string) (int, error) {
	errs := make([]error, len(nodes))
	var votes atomic.Int32
	fan(len(nodes), func(i int) {
		ok, err := nodes[i].SetNX(ctx, key, key, FanoutTTL).Result()
		if err != nil {
			errs[i] = err
		} else if ok {
			votes.Add(1)
		}
	})
	fan(len(nodes), func(i int) {
		if err := compareAndDelete.Run(ctx, nodes[i], []string{key}, key).Err(); err != nil && errs[i] == nil {
			errs[i] = err
		}
	})
	return int(votes.Load()), errors.Join(errs...)
}

// fan runs f(0) … f(n-1) in parallel and waits for them all.
func fan(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

package floor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/inventory"
)

// Client is one measurement of the bare client: what a reservation costs a
// process that does only what one must, open loop at a rate, so that the
// load generator's CPU per reservation can be read against it.
type Client struct {
	// Rate is the offered rate; Ops the operations sent, Errors those that
	// failed (no quorum, or the store refused).
	Rate       float64 `json:"rate"`
	Nodes      int     `json:"nodes"`
	Ops        int64   `json:"ops"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	DurationS  float64 `json:"duration_s"`
	// CPUS is this process's CPU time over the run (user and system,
	// getrusage), CPUMsPerOp per operation sent.
	CPUS       float64 `json:"cpu_s"`
	CPUMsPerOp float64 `json:"cpu_ms_per_op"`
}

// clientSKUs is how many SKUs the client's store spreads its reservations
// over, each seeded with enough stock for any run.
const clientSKUs = 1000

// MeasureClient runs the least a reservation under Redlock must do, open
// loop at rate for d: at each operation's due time, in its own goroutine,
// one SET key token NX PX FanoutTTL to every node in parallel (waiting for
// them all), one compare-and-delete to every node in parallel, and one
// reservation transaction on a SQLite store in dir (the db-atomic guard's
// write: the stock's conditional UPDATE and the ledger's INSERT in one
// transaction, as package inventory commits it). It returns this
// process's CPU per operation, the operations' drain included.
func MeasureClient(ctx context.Context, nodes []*redis.Client, dir string, rate float64, d time.Duration) (Client, error) {
	if len(nodes) == 0 || rate <= 0 || d <= 0 {
		return Client{}, fmt.Errorf("floor: client: %d nodes at %v/s for %v: want nodes, a rate and a while", len(nodes), rate, d)
	}
	store, err := inventory.OpenStore(ctx, "sqlite:"+filepath.Join(dir, "client.db"))
	if err != nil {
		return Client{}, fmt.Errorf("floor: client: %w", err)
	}
	defer store.Close()
	skus := make([]string, clientSKUs)
	for i := range skus {
		skus[i] = "floor-" + strconv.Itoa(i)
	}
	if err := store.SeedMany(ctx, skus, inventory.MaxStock); err != nil {
		return Client{}, fmt.Errorf("floor: client: %w", err)
	}
	svc, err := inventory.NewService(store, inventory.GuardDBAtomic, nil)
	if err != nil {
		return Client{}, fmt.Errorf("floor: client: %w", err)
	}
	quorum := len(nodes)/2 + 1
	prefix := fmt.Sprintf("lock:client-%d-", time.Now().UnixNano())
	var (
		seq, failed atomic.Int64
		mu          sync.Mutex
		first       error
		wg          sync.WaitGroup
	)
	op := func(n int64) {
		defer wg.Done()
		key := prefix + strconv.FormatInt(n, 10)
		votes, err := lockUnlock(ctx, nodes, key)
		if votes < quorum {
			if err == nil {
				err = errors.New("the others found the key set")
			}
			err = fmt.Errorf("%s: %d of %d SETs, want %d: %w", key, votes, len(nodes), quorum, err)
		} else {
			_, err = svc.Reserve(ctx, inventory.Request{SKU: skus[n%clientSKUs], Quantity: 1, RequestID: key})
		}
		if err != nil {
			failed.Add(1)
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
	}

	cpu0 := selfCPU()
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for due := start; due.Sub(start) < d; due = due.Add(interval) {
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go op(seq.Add(1))
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := selfCPU() - cpu0
	if err := ctx.Err(); err != nil {
		return Client{}, fmt.Errorf("floor: client: %w", err)
	}
	c := Client{Rate: rate, Nodes: len(nodes), Ops: seq.Load(), Errors: failed.Load(), DurationS: elapsed.Seconds(), CPUS: cpu.Seconds()}
	if c.Ops > 0 {
		c.CPUMsPerOp = cpu.Seconds() * 1000 / float64(c.Ops)
	}
	if first != nil {
		c.FirstError = first.Error()
	}
	if c.Errors == c.Ops {
		return c, fmt.Errorf("floor: client: every operation failed; the first said %w", first)
	}
	return c, nil
}

// selfCPU is this process's CPU time so far, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

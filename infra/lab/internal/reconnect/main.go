// Command reconnect measures how long a lock client goes without a node
// that crashes and restarts at once: on a lab brought up with
// --restart-delay 0s, it kills one node a number of times and times, for a
// client built as the lock guards build theirs (redlock.NewNodes, the lab's
// redlock user, TLS when the lab has it), the outage from the kill to the
// client's first answered PING, and the part of it after the node's
// supervisor saw the node up again (its status's Since). scripts/tlscost.sh runs it on a plain lab
// and a TLS lab, so that the difference is the TLS reconnect: a TCP connect
// plus a TLS handshake instead of a TCP connect. It also times that connect
// alone: a fresh connection's first PING (dial, handshake, HELLO with the
// login, PING), --connects times.
//
//	go run ./infra/lab/internal/reconnect --state-dir DIR [--node 2] [--rounds 10] [--connects 200]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/redlock"
)

// quiet drops go-redis's log: every refused dial during an outage is one line.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	dir := flag.String("state-dir", "", "the lab's state directory (brought up with --restart-delay 0s)")
	id := flag.Int("node", 2, "the node to kill")
	rounds := flag.Int("rounds", 10, "kills")
	connects := flag.Int("connects", 200, "fresh connections timed")
	flag.Parse()
	redis.SetLogger(quiet{})
	if err := run(context.Background(), *dir, *id, *rounds, *connects); err != nil {
		fmt.Fprintln(os.Stderr, "reconnect:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dir string, id, rounds, connects int) error {
	l, err := lab.Open(dir)
	if err != nil {
		return err
	}
	if !l.NoRestartDelay() {
		return errors.New("the lab restarts a crashed node after a delay: bring it up with --restart-delay 0s")
	}
	if id < 1 || id > len(l.Nodes()) || rounds < 1 || connects < 0 {
		return fmt.Errorf("node %d of %d, %d rounds: want a node of the lab and at least one round", id, len(l.Nodes()), rounds)
	}
	creds, err := l.Credentials()
	if err != nil {
		return err
	}
	tlsCfg, err := l.TLSConfig()
	if err != nil {
		return err
	}
	addr := l.Addrs()[id-1]
	proto := "plain"
	if l.TLS() {
		proto = "tls"
	}
	var connect []time.Duration
	for i := range connects {
		o := &redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1, Protocol: 2, DisableIdentity: true}
		redlock.WithNodeTimeout(time.Second)(o)
		redlock.WithAuth(creds.Redlock.Name, creds.Redlock.Password)(o)
		redlock.WithTLS(tlsCfg)(o)
		fresh := redis.NewClient(o)
		start := time.Now()
		err := fresh.Ping(ctx).Err()
		connect = append(connect, time.Since(start))
		fresh.Close()
		if err != nil {
			return fmt.Errorf("connect %d: %w", i+1, err)
		}
	}
	slices.Sort(connect)
	if len(connect) > 0 {
		fmt.Printf("%s: %d fresh connections to node %d, first PING (dial, handshake, HELLO, PING): %s, p99 %v\n",
			proto, len(connect), id, spread(connect), connect[len(connect)*99/100].Round(10*time.Microsecond))
	}
	c := redlock.NewNodes([]string{addr}, redlock.WithTLS(tlsCfg), redlock.WithAuth(creds.Redlock.Name, creds.Redlock.Password))[0]
	defer c.Close()
	ping := func() error {
		pctx, cancel := context.WithTimeout(ctx, redlock.DefaultNodeTimeout)
		defer cancel()
		return c.Ping(pctx).Err()
	}
	var outages, afterUp []time.Duration
	for r := range rounds {
		if err := waitFor(ping, 30*time.Second); err != nil {
			return fmt.Errorf("round %d: node %d does not answer before the kill: %w", r+1, id, err)
		}
		start := time.Now()
		if _, err := l.Kill(ctx, id); err != nil {
			return fmt.Errorf("round %d: %w", r+1, err)
		}
		if err := waitFor(ping, 30*time.Second); err != nil {
			return fmt.Errorf("round %d: node %d does not answer after the kill: %w", r+1, id, err)
		}
		ok := time.Now()
		outages = append(outages, ok.Sub(start))
		if st, err := l.NodeStatus(ctx, id); err == nil && st.State == node.Up && st.Since.After(start) && !st.Since.After(ok) {
			afterUp = append(afterUp, ok.Sub(st.Since))
		}
	}
	slices.Sort(outages)
	slices.Sort(afterUp)
	fmt.Printf("%s: %d kills of node %d; from the kill to the client's first answered PING: %s; of it, after the supervisor saw the node up (%d of %d kills): %s\n",
		proto, rounds, id, spread(outages), len(afterUp), rounds, spread(afterUp))
	return nil
}

// spread is "min A, p50 B, max C" of sorted durations.
func spread(d []time.Duration) string {
	if len(d) == 0 {
		return "-"
	}
	r := func(x time.Duration) time.Duration { return x.Round(10 * time.Microsecond) }
	return fmt.Sprintf("min %v, p50 %v, max %v", r(d[0]), r(d[len(d)/2]), r(d[len(d)-1]))
}

// waitFor calls f every millisecond until it succeeds or limit passes.
func waitFor(f func() error, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

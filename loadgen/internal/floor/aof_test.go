package floor

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// TestCompactAOF: the log of a node with an AOF shrinks to what its data
// needs, once per call, and a node without one is left alone.
func TestCompactAOF(t *testing.T) {
	ctx := context.Background()
	withAOF := redlocktest.Start(t, 2, redlocktest.Options{})
	without := redlocktest.Start(t, 1, redlocktest.Options{Extra: []string{"appendonly no"}})
	var nodes []*redis.Client
	for _, addr := range append(withAOF.Addrs(), without.Addrs()...) {
		n := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { n.Close() })
		nodes = append(nodes, n)
	}
	// Lock+unlock cycles: the log grows, the data stays empty.
	for _, n := range nodes {
		for i := range 2000 {
			key := "lock:aof-" + strconv.Itoa(i)
			if err := n.Set(ctx, key, "token", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := n.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	field := func(n *redis.Client, k string) int64 {
		t.Helper()
		info, err := persistence(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := strconv.ParseInt(info[k], 10, 64)
		return v
	}
	before := []int64{field(nodes[0], "aof_current_size"), field(nodes[1], "aof_current_size")}
	for round := 1; round <= 2; round++ {
		if err := CompactAOF(ctx, nodes); err != nil {
			t.Fatal(err)
		}
		for i, n := range nodes[:2] {
			if got := field(n, "aof_rewrites"); got != int64(round) {
				t.Errorf("round %d, node %d: %d rewrites, want %d", round, i, got, round)
			}
			if size := field(n, "aof_current_size"); size >= before[i]/10 {
				t.Errorf("round %d, node %d: the log is %d bytes after the rewrite, %d before; want it to have shrunk tenfold", round, i, size, before[i])
			}
		}
		if got := field(nodes[2], "aof_rewrites"); got != 0 {
			t.Errorf("round %d: the node without an AOF rewrote it %d times, want 0", round, got)
		}
	}
}

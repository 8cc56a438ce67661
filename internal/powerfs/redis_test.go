package powerfs

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// redisAcrossACut writes n keys to a real redis-server whose data directory
// is a powerfs, each acknowledged, then kills it, cuts the power and starts
// it again on what the disk kept. It returns how many keys came back.
func redisAcrossACut(t *testing.T, fsync string, n int) int {
	t.Helper()
	requireFUSE(t)
	bin := testenv.Require(t, "redis-server")
	ctx := context.Background()
	base := t.TempDir()
	data := filepath.Join(base, "data")
	f, err := Mount(data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	opts := redlocktest.Options{AppendFsync: fsync, Extra: []string{"dir " + data}}
	start := func(conf string) *redlocktest.Node {
		node, err := redlocktest.Launch(bin, filepath.Join(base, conf), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(node.Kill)
		return node
	}

	node := start("first")
	c := redis.NewClient(&redis.Options{Addr: node.Addr})
	for i := range n {
		if err := c.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	node.Kill()
	res, err := f.Cut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("appendfsync %s: the cut took %d bytes off %v", fsync, res.Truncated, res.Files)

	node = start("second")
	c = redis.NewClient(&redis.Options{Addr: node.Addr})
	defer c.Close()
	got, err := c.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	node.Kill()
	return int(got)
}

func TestRedisAlwaysKeepsEveryAcknowledgedWrite(t *testing.T) {
	const n = 500
	if got := redisAcrossACut(t, "always", n); got != n {
		t.Errorf("appendfsync always: got %d keys back after the cut, want all %d", got, n)
	}
}

func TestRedisNoLosesWrites(t *testing.T) {
	const n = 500
	if got := redisAcrossACut(t, "no", n); got >= n {
		t.Errorf("appendfsync no: got %d keys back after the cut, want fewer than %d", got, n)
	}
}

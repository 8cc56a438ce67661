// The power-loss check: what a cut keeps under each persistence profile, on
// the power-loss filesystem.

package faultcheck

import (
	"context"
	"fmt"
	"github.com/redis/go-redis/v9"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/node"
	"strings"
	"testing"
	"time"
)

// AwaitAOFWritten waits until redis-server has written every write it
// acknowledged to its AOF. Under appendfsync everysec it acknowledges
// writes it has not written yet while a background fsync is still running
// (for up to 2 s: "postponed" AOF writes), and those are lost even by a
// kill -9; a test that wants a write on file waits for this.
func AwaitAOFWritten(t *testing.T, c *redis.Client) {
	t.Helper()
	Eventually(t, 10*time.Second, "AOF buffer written", func() error {
		info, err := c.Info(context.Background(), "persistence").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "aof_buffer_length:0\r\n") {
			return fmt.Errorf("%s", info)
		}
		return nil
	})
}

// PowerLoss cuts the power of node id (a process node or a machine) and
// checks what its filesystem kept: set A is written and given time to be
// fsynced (everysec fsyncs within a second or two), set B is written and
// the power is cut at once. A must survive unless the profile never fsyncs
// (no-fsync) or keeps nothing (none); B must survive under always, and is
// lost under no-fsync and none. Under everysec B is lost or kept by whether
// the once-a-second fsync fell between its write and the cut, so it is only
// reported (and not every key lost is a write the cut took: Redis may not
// have written it yet, while a background fsync runs).
func PowerLoss(t *testing.T, l Lab, id int, prof node.Persistence) {
	t.Helper()
	ctx := context.Background()
	c := Client(t, l, id, 2*time.Second)
	keys := func(set string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("lock:plfs:%s%d", set, i))
		}
		return out
	}
	a, b := keys("a", 20), keys("b", 5)
	for _, k := range a {
		if err := c.Set(ctx, k, "v", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if prof == node.PersistEverysec {
		time.Sleep(2500 * time.Millisecond) // at least one background fsync since A
	}
	for _, k := range b {
		if err := c.Set(ctx, k, "v", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := Status(t, l, id)
	res, err := l.PowerLoss(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if res.ID == "" || res.Kind != fault.PowerLoss || res.PowerLoss == nil || res.PowerLoss.Persistence != string(prof) || res.PowerLoss.Model != node.PowerLossFilesystem {
		t.Fatalf("power-loss result: got %+v, want a power-loss fault on a %s node, filesystem model", res, prof)
	}
	Eventually(t, 2*time.Minute, "node answers after the power loss", func() error { return Ping(t, l, id, 300*time.Millisecond) })
	if after := Status(t, l, id); after.RedisPID == before.RedisPID || after.Restarts != before.Restarts+1 {
		t.Errorf("after power loss: pid %d restarts %d, want a new process and restarts %d", after.RedisPID, after.Restarts, before.Restarts+1)
	}
	c = Client(t, l, id, 2*time.Second)
	count := func(ks []string) int {
		n, err := c.Exists(ctx, ks...).Result()
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	pl := res.PowerLoss
	gotA, gotB := count(a), count(b)
	t.Logf("node %d %s: after the cut %d of %d of set A, %d of %d of set B; cut %d bytes, %d writes from %v", id, prof, gotA, len(a), gotB, len(b), pl.CutBytes, pl.CutCommands, pl.CutFiles)
	wantA, wantB := len(a), len(b)
	switch prof {
	case node.PersistNone, node.PersistNoFsync:
		wantA, wantB = 0, 0
	case node.PersistEverysec:
		wantB = gotB
	}
	if gotA != wantA {
		t.Errorf("%s: %d of %d keys written well before the power loss are there, want %d", prof, gotA, len(a), wantA)
	}
	if gotB != wantB {
		t.Errorf("%s: %d of %d keys written just before the power loss are there, want %d", prof, gotB, len(b), wantB)
	}
	if prof == node.PersistAlways && (pl.CutBytes != 0 || pl.CutCommands != 0) {
		t.Errorf("always: got %+v, want nothing cut", pl)
	}
	if prof == node.PersistNoFsync && (pl.CutBytes == 0 || pl.CutCommands < int64(len(a)+len(b))) {
		t.Errorf("no-fsync: got %+v, want the unsynced AOF cut, at least the %d writes of sets A and B", pl, len(a)+len(b))
	}
	FaultEnded(t, l, res.ID, map[string]string{
		"persistence": string(prof), "model": node.PowerLossFilesystem, "cut_bytes": fmt.Sprint(pl.CutBytes), "cut_commands": fmt.Sprint(pl.CutCommands),
	})
}

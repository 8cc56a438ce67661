package floor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// aofPoll is how often CompactAOF looks at a rewrite in progress.
const aofPoll = 50 * time.Millisecond

// CompactAOF rewrites the append-only file of every node that keeps one
// (BGREWRITEAOF) and waits until each rewrite has ended, so that the next
// measurement starts on a small log. A redis-server rewrites its AOF on its
// own once the log passes auto-aof-rewrite-min-size (64 MB, about 450,000
// lock+unlock cycles): the fork and the copy land in whatever runs then, as
// a second of slow fsyncs the measurement would pin on the load. Nodes
// without an AOF are left alone. The clients need the right to run
// BGREWRITEAOF and INFO (the lab's admin user).
func CompactAOF(ctx context.Context, nodes []*redis.Client) error {
	started := make([]int64, len(nodes)) // each node's count of rewrites before
	for i, n := range nodes {
		info, err := persistence(ctx, n)
		if err != nil {
			return err
		}
		if info["aof_enabled"] != "1" {
			started[i] = -1
			continue
		}
		fmt.Sscan(info["aof_rewrites"], &started[i])
		// A rewrite already under way is waited for, then this one runs:
		// Redis schedules it after the one in progress.
		if err := n.BgRewriteAOF(ctx).Err(); err != nil && !strings.Contains(err.Error(), "already in progress") {
			return fmt.Errorf("floor: %s: BGREWRITEAOF: %w", n.Options().Addr, err)
		}
	}
	for i, n := range nodes {
		if started[i] < 0 {
			continue
		}
		for {
			info, err := persistence(ctx, n)
			if err != nil {
				return err
			}
			var rewrites int64
			fmt.Sscan(info["aof_rewrites"], &rewrites)
			if info["aof_rewrite_in_progress"] == "0" && info["aof_rewrite_scheduled"] == "0" && rewrites > started[i] {
				if s := info["aof_last_bgrewrite_status"]; s != "ok" {
					return fmt.Errorf("floor: %s: the AOF rewrite ended %q", n.Options().Addr, s)
				}
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("floor: %s: waiting for the AOF rewrite: %w", n.Options().Addr, ctx.Err())
			case <-time.After(aofPoll):
			}
		}
	}
	return nil
}

// persistence is a node's INFO persistence section as fields.
func persistence(ctx context.Context, n *redis.Client) (map[string]string, error) {
	s, err := n.Info(ctx, "persistence").Result()
	if err != nil {
		return nil, fmt.Errorf("floor: %s: INFO persistence: %w", n.Options().Addr, err)
	}
	info := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			info[k] = v
		}
	}
	return info, nil
}

package lab

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed clockjump.lua
var clockJumpLua string

var clockJumpScript = redis.NewScript(clockJumpLua)

// ClockJumpResult says what a clock jump did to a node's keys.
type ClockJumpResult struct {
	Adjusted int64 `json:"adjusted"` // keys whose TTL moved by the jump
	Deleted  int64 `json:"deleted"`  // keys that expired because of it
}

// clockJump models a step of the node's wall clock by `by` (forward when
// positive) on the keys of c's database. It is a model, not a real clock
// step: the node's TIME and its clients' clocks do not move, only what Redis
// derives from its clock for keys. The runbook gives the real-VM command.
func clockJump(ctx context.Context, c *redis.Client, by time.Duration) (ClockJumpResult, error) {
	v, err := clockJumpScript.Run(ctx, c, nil, by.Milliseconds()).Int64Slice()
	if err != nil {
		return ClockJumpResult{}, fmt.Errorf("lab: clock jump: %w", err)
	}
	if len(v) != 2 {
		return ClockJumpResult{}, fmt.Errorf("lab: clock jump: unexpected reply %v", v)
	}
	return ClockJumpResult{Adjusted: v[0], Deleted: v[1]}, nil
}

package node

import (
	"context"
	"github.com/redlocklab/redlocklab/infra/fault"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

func TestClockJumpBackwardLengthensTTLs(t *testing.T) {
	c := redlocktest.Start(t, 1, redlocktest.Options{}).Nodes[0].Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := clockJump(ctx, c, -5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Adjusted != 1 || res.Deleted != 0 {
		t.Errorf("got %+v, want 1 adjusted, 0 deleted", res)
	}
	if pttl, _ := c.PTTL(ctx, "k").Result(); pttl <= 10*time.Second || pttl > 15*time.Second {
		t.Errorf("PTTL after a 5s backward jump: got %v, want in (10s, 15s]", pttl)
	}
}

func TestClockJumpEmptyDatabase(t *testing.T) {
	c := redlocktest.Start(t, 1, redlocktest.Options{}).Nodes[0].Client()
	res, err := clockJump(context.Background(), c, time.Hour)
	if err != nil || res != (fault.ClockJumpResult{}) {
		t.Errorf("got %+v, %v; want nothing touched, no error", res, err)
	}
}

package node

import (
	"context"
	_ "embed"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/fault"
	"maps"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed clockjump.lua
var clockJumpLua string

var clockJumpScript = redis.NewScript(clockJumpLua)

// clockJump models a step of the node's wall clock by `by` (forward when
// positive) on the keys of c's database. It is a model, not a real clock
// step: the node's TIME and its clients' clocks do not move, only what Redis
// derives from its clock for keys. The runbook gives the real-VM command.
func clockJump(ctx context.Context, c *redis.Client, by time.Duration) (fault.ClockJumpResult, error) {
	v, err := clockJumpScript.Run(ctx, c, nil, by.Milliseconds()).Int64Slice()
	if err != nil {
		return fault.ClockJumpResult{}, fmt.Errorf("node: clock jump: %w", err)
	}
	if len(v) != 2 {
		return fault.ClockJumpResult{}, fmt.Errorf("node: clock jump: unexpected reply of %d values, want 2", len(v))
	}
	return fault.ClockJumpResult{Adjusted: v[0], Deleted: v[1]}, nil
}

// clockJump applies the clock-jump model (see clockjump.lua) by p's `by`
// through the node's private port, so it works on a partitioned node too.
func (s *supervisor) clockJump(ctx context.Context, p fault.Params) (fault.Result, error) {
	by := p.D("by")
	s.mu.Lock()
	if s.st.State != Up {
		err := s.notRunningLocked()
		s.mu.Unlock()
		return fault.Result{}, err
	}
	s.mu.Unlock()
	params := notes(ctx)
	params["by"] = by.String()
	f, err := s.faults.rec.start(fault.ClockJump, params)
	if err != nil {
		s.log.Printf("record: %v", err)
	}
	res, err := clockJump(ctx, s.direct, by)
	endParams := map[string]string{
		"adjusted": strconv.FormatInt(res.Adjusted, 10), "deleted": strconv.FormatInt(res.Deleted, 10),
	}
	if err != nil {
		endParams = map[string]string{"error": err.Error()}
	}
	if rerr := s.faults.rec.end(f.ID, fault.ClockJump, endParams); rerr != nil {
		s.log.Printf("record: %v", rerr)
	}
	if err != nil {
		return fault.Result{}, err
	}
	f.End = time.Now()
	maps.Copy(f.Params, endParams)
	r := recorded(&f)
	r.ClockJump = &res
	return r, nil
}

// clockRate models a clock running p's factor times as fast as real time
// for p's `for`: every tick the keys' TTLs move by (factor-1) times the
// real time elapsed. A factor below 1 (a slow clock) lengthens them.
func (s *supervisor) clockRate(ctx context.Context, p fault.Params) (fault.Result, error) {
	const tick = 100 * time.Millisecond
	factor, d := p.N("factor"), p.D(fault.For)
	s.mu.Lock()
	if s.rateStop != nil {
		s.rateStop()
	}
	params := notes(ctx)
	params["factor"], params["for"] = strconv.FormatFloat(factor, 'g', -1, 64), d.String()
	f := s.faults.startLocked(fault.ClockRate, params)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	s.rateStop = cancel
	s.mu.Unlock()

	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		t := time.NewTicker(tick)
		defer t.Stop()
		last := time.Now()
		var carry time.Duration // sub-millisecond remainder
		var adjusted, deleted int64
		for {
			select {
			case <-ctx.Done():
				// What the clock gained since the last tick is owed too.
				end := time.Now()
				if dl, ok := ctx.Deadline(); ok && end.After(dl) {
					end = dl
				}
				carry += time.Duration(float64(end.Sub(last)) * (factor - 1))
				if step := carry.Truncate(time.Millisecond); step != 0 {
					jctx, jcancel := context.WithTimeout(context.Background(), time.Second)
					if res, err := clockJump(jctx, s.direct, step); err == nil {
						adjusted += res.Adjusted
						deleted += res.Deleted
					}
					jcancel()
				}
				s.mu.Lock()
				if s.st.Active[fault.ClockRate] == f.ID {
					s.faults.endLocked(fault.ClockRate, map[string]string{
						"adjusted": strconv.FormatInt(adjusted, 10), "deleted": strconv.FormatInt(deleted, 10),
					})
				}
				s.mu.Unlock()
				return
			case now := <-t.C:
				carry += time.Duration(float64(now.Sub(last)) * (factor - 1))
				last = now
				step := carry.Truncate(time.Millisecond)
				if step == 0 {
					continue
				}
				jctx, jcancel := context.WithTimeout(ctx, time.Second)
				res, err := clockJump(jctx, s.direct, step)
				jcancel()
				if err != nil {
					// Down or paused right now: the clock still ran, so the
					// jump is owed and applied once the node answers.
					continue
				}
				carry -= step
				adjusted += res.Adjusted
				deleted += res.Deleted
			}
		}
	}()
	return recorded(&f), nil
}

// stopClockRate ends a clock-rate's goroutine.
func (s *supervisor) stopClockRate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rateStop != nil {
		s.rateStop()
		s.rateStop = nil
	}
}

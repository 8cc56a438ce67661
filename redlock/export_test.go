package redlock

import (
	"context"
	"time"
)

// HoldSlot takes one attempt slot of c, as an admitted attempt would, and
// returns the function that frees it. It blocks while every slot is taken
// and must only be used on a Client with WithMaxConcurrentAttempts.
func HoldSlot(c *Client) (release func()) {
	c.limit.acquire(context.Background(), time.Time{}, nil) // no deadline, no done: cannot fail
	return func() { c.limit.release(time.Time{}, signalNone, time.Now()) }
}

// SlotWaiters returns how many callers wait for an attempt slot of c.
func SlotWaiters(c *Client) int { return c.limit.waiting() }

// FillLimit takes every place under c's concurrency limit, as that many
// admitted attempts would, and returns the function that frees them.
func FillLimit(c *Client) (release func()) {
	n := 0
	for {
		if ok, _ := c.limit.tryAcquire(); !ok {
			break
		}
		n++
	}
	return func() {
		for range n {
			c.limit.release(time.Time{}, signalNone, time.Now())
		}
	}
}

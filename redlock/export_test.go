package redlock

// HoldSlot takes one attempt slot of c, as an admitted attempt would, and
// returns the function that frees it. It blocks while every slot is taken
// and must only be used on a Client with WithMaxConcurrentAttempts.
func HoldSlot(c *Client) (release func()) {
	c.slots <- struct{}{}
	return func() { <-c.slots }
}

// SlotWaiters returns how many callers wait for an attempt slot of c.
func SlotWaiters(c *Client) int { return int(c.waiting.Load()) }

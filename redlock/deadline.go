package redlock

import (
	"context"
	"sync"
	"time"
)

// deadlineSlot is how finely the rounds' Done channels are shared: every
// round whose deadline falls in the same slot gets the same channel, closed
// at the slot's end, at most this long after the round's own deadline.
const deadlineSlot = time.Millisecond

// deadlines hands out the Done channels of rounds (roundCtx). A context of
// its own per round (context.WithTimeout) cost a runtime timer, a channel
// and the context itself, about 600 bytes and a timer-heap insertion and
// removal, for every round of a healthy lock whose requests never waited
// on it. Rounds that start within a slot of each other share one channel
// and one timer instead.
type deadlines struct {
	mu    sync.Mutex
	slots map[int64]chan struct{} // slot index (since epoch) -> its channel
}

// done returns the channel closed once deadline (since epoch) has passed:
// at the end of its slot.
func (d *deadlines) done(deadline time.Duration) <-chan struct{} {
	k := int64((deadline + deadlineSlot - 1) / deadlineSlot)
	d.mu.Lock()
	defer d.mu.Unlock()
	if ch, ok := d.slots[k]; ok {
		return ch
	}
	if d.slots == nil {
		d.slots = make(map[int64]chan struct{})
	}
	ch := make(chan struct{})
	d.slots[k] = ch
	// The timer's function ends at once; one that fires after the Client
	// closed only closes a channel nobody waits on.
	time.AfterFunc(time.Duration(k)*deadlineSlot-time.Since(epoch), func() {
		d.mu.Lock()
		delete(d.slots, k)
		d.mu.Unlock()
		close(ch)
	})
	return ch
}

// roundCtx is the context of a round's node requests: the values of the
// caller's context (not its cancellation: see fanout), the round's
// deadline, which go-redis turns into the connection's read and write
// deadlines, exactly, and a Done channel shared with the rounds of the same
// deadline slot, which ends waits for a pooled connection or a dial at most
// deadlineSlot late. It lives inside its round: no allocation of its own.
type roundCtx struct {
	context.Context
	deadline time.Time
	done     <-chan struct{}
}

func (c *roundCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *roundCtx) Done() <-chan struct{}       { return c.done }

func (c *roundCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

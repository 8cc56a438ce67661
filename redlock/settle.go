package redlock

import (
	"context"
	"errors"
	"time"
)

// A request that times out on the client may still run on the server: a
// stalled node (SIGSTOP, a long fork or GC pause, a frozen VM) keeps what it
// was sent queued and runs it when it resumes. A single release with the same
// short timeout as the SET is then lost while the stall lasts, and the queued
// SET lands afterwards and holds the key, owned by nobody, for a whole TTL.
// Worse, a request on a new connection cannot even reach a stalled node:
// go-redis opens every connection with a HELLO round trip the frozen server
// never answers, so the release is never written at all, while the SET, sent
// on a connection that was ready before the stall, is already queued.
//
// So a release whose outcome on a node is unknown is retried, with backoff,
// until the node gives a definite answer. A resumed node works through what
// was queued in the order it arrived (a request on a new connection waits
// for the handshake first), and every retry is sent after the SET, so the
// release it answers runs after the SET: the SET has run and the release
// deleted its key, or the SET never arrived.

// written reports whether a SET (or an extend that may restore the key)
// answered a may have left our key on the node, and whether that is unknown
// rather than known (a timeout or a broken connection, not an answer).
func written(a answer) (mayHold, unsure bool) {
	if a.err != nil {
		u := unknown(a.err)
		return u, u
	}
	return a.outcome == Granted, false
}

// settle makes sure that node i no longer holds key with token, given the
// answer a of a release already tried there. It returns at once when a is
// definite: Granted (deleted), or Taken (our token was not there) when the
// SET's outcome is known. Otherwise it retries, waiting c.retry(n) before
// retry n, until:
//
//   - the node answers Granted;
//   - the node answers Taken, for a node whose SET outcome is unsure (a
//     timeout) only the second time: the first "not there" may come before
//     a SET that a proxy or the network delayed more than the release, and
//     one more release a backoff step later confirms it;
//   - the next retry would come after until (since epoch), when a key set by
//     the SET in time has expired anyway. A SET that a node stalled for
//     longer than the TTL runs only after that, and then holds the key for a
//     TTL from when it ran: no client-side retry can bound that;
//   - the Client closes: then it makes one last try at once and ends, so
//     that Close waits for at most about one request timeout.
//
// A retry that finds releaseRetryConcurrency retries already in flight to the
// node is skipped (it counts as unanswered); the last try at Close is not
// bounded. It runs on a round's node goroutine, which the Client's WaitGroup
// counts.
func (c *Client) settle(ctx context.Context, i int, key, token string, a answer, unsure bool, until time.Duration) {
	var (
		confirmed bool // unsure: one Taken already seen
		last      bool
		timer     *time.Timer
	)
	for n := 1; ; n++ {
		if a.err == nil {
			if a.outcome == Granted || !unsure || confirmed {
				return
			}
			confirmed = true
		}
		if last {
			return
		}
		wait, _ := c.retry(n)
		if time.Since(epoch)+wait >= until {
			return
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-timer.C:
		case <-c.done:
			last = true
		}
		if last {
			a = c.releaseOnce(ctx, i, key, token)
			continue
		}
		select {
		case c.retrySlots[i] <- struct{}{}:
			a = c.releaseOnce(ctx, i, key, token)
			<-c.retrySlots[i]
		default:
			a = answer{err: errRetryBusy}
		}
	}
}

// errRetryBusy stands for a retry skipped because the node already has
// releaseRetryConcurrency retries in flight.
var errRetryBusy = errors.New("redlock: release retries to the node are busy")

// releaseOnce sends one compare-and-delete of key with token to node i,
// bounded by the request timeout. It uses EVAL, not EVALSHA: a node that
// just restarted or resumed may not have the script cached, and the NOSCRIPT
// round trip would cost a second timeout.
func (c *Client) releaseOnce(ctx context.Context, i int, key, token string) answer {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	v, err := releaseScript.call(key, token).eval(rctx, c.nodes[i]).Result()
	c.heardFrom(i, err)
	return releaseAnswer(v, err)
}

// releaseAnswer turns the reply of the release script into an answer:
// Granted when it deleted our key, Taken when our token was not there.
func releaseAnswer(v int64, err error) answer {
	switch {
	case err != nil:
		return answer{err: err}
	case v == 1:
		return answer{outcome: Granted}
	default:
		return answer{outcome: Taken}
	}
}

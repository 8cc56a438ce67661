package redlock

import (
	"testing"
	"time"
)

func TestBreakerStateMachine(t *testing.T) {
	const cooldown = time.Second
	// A step either admits an attempt (report false) or reports how an
	// admitted one went (report true), after moving the clock by advance.
	type step struct {
		advance time.Duration
		report  bool
		p       pass         // report: the pass being reported
		h       quorumHealth // report: how it went
		want    pass         // admit: the expected pass
		state   BreakerState // the state admit saw, or done left
		changed bool         // report: whether done changed the state
	}
	admit := func(want pass, state BreakerState) step { return step{want: want, state: state} }
	done := func(p pass, h quorumHealth, state BreakerState, changed bool) step {
		return step{report: true, p: p, h: h, state: state, changed: changed}
	}
	later := func(d time.Duration, s step) step { s.advance = d; return s }
	open := []step{ // three unavailable attempts in a row (three nodes failing each time) open it
		admit(passNormal, BreakerClosed), done(passNormal, quorumDown, BreakerClosed, false),
		admit(passNormal, BreakerClosed), done(passNormal, quorumDown, BreakerClosed, false),
		admit(passNormal, BreakerClosed), done(passNormal, quorumDown, BreakerOpen, true),
	}
	then := func(steps ...step) []step { return append(append([]step(nil), open...), steps...) }

	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"threshold consecutive unavailable attempts open it", then(
			admit(passRejected, BreakerOpen),
		)},
		{"a quorum answering resets the nodes' counts", []step{
			done(passNormal, quorumDown, BreakerClosed, false),
			done(passNormal, quorumDown, BreakerClosed, false),
			done(passNormal, quorumUp, BreakerClosed, false), // granted or contended
			done(passNormal, quorumDown, BreakerClosed, false),
			done(passNormal, quorumDown, BreakerClosed, false),
			admit(passNormal, BreakerClosed),
		}},
		{"attempts that say nothing do not count", []step{
			done(passNormal, quorumDown, BreakerClosed, false),
			done(passNormal, quorumDown, BreakerClosed, false),
			done(passNormal, quorumUnknown, BreakerClosed, false),
			done(passNormal, quorumUnknown, BreakerClosed, false),
			admit(passNormal, BreakerClosed),
		}},
		{"one probe after the cooldown, which closes it", then(
			later(cooldown-time.Millisecond, admit(passRejected, BreakerOpen)),
			later(time.Millisecond, admit(passProbe, BreakerHalfOpen)),
			admit(passRejected, BreakerHalfOpen),
			done(passProbe, quorumUp, BreakerClosed, true),
			admit(passNormal, BreakerClosed),
		)},
		{"a failed probe reopens it for another cooldown", then(
			later(cooldown, admit(passProbe, BreakerHalfOpen)),
			later(cooldown/2, done(passProbe, quorumDown, BreakerOpen, true)),
			later(cooldown-time.Millisecond, admit(passRejected, BreakerOpen)),
			later(time.Millisecond, admit(passProbe, BreakerHalfOpen)),
		)},
		{"a probe that says nothing lets the next attempt probe", then(
			later(cooldown, admit(passProbe, BreakerHalfOpen)),
			done(passProbe, quorumUnknown, BreakerHalfOpen, false),
			admit(passProbe, BreakerHalfOpen),
			admit(passRejected, BreakerHalfOpen),
		)},
		{"an earlier attempt that finds a quorum closes it", then(
			done(passNormal, quorumUp, BreakerClosed, true),
			admit(passNormal, BreakerClosed),
		)},
		{"an earlier attempt that fails neither reopens nor delays it", then(
			later(cooldown/2, done(passNormal, quorumDown, BreakerOpen, false)),
			later(cooldown/2, admit(passProbe, BreakerHalfOpen)),
			done(passNormal, quorumDown, BreakerHalfOpen, false),
			done(passProbe, quorumUp, BreakerClosed, true),
		)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_000_000, 0)
			b := newBreaker(3, cooldown, 5, 3, func() time.Time { return now })
			for i, s := range tc.steps {
				now = now.Add(s.advance)
				if !s.report {
					p, state := b.admit()
					if p != s.want || state != s.state {
						t.Fatalf("step %d admit: got pass %d in state %v, want pass %d in %v", i, p, state, s.want, s.state)
					}
					continue
				}
				state, changed := b.done(s.p, s.h, nodesFor(s.h))
				if state != s.state || changed != s.changed {
					t.Fatalf("step %d done(%d, %d): got %v changed=%v, want %v changed=%v", i, s.p, s.h, state, changed, s.state, s.changed)
				}
			}
		})
	}
}

// nodesFor is each node's part in an attempt that went as h, on five nodes:
// a quorum answered (all granted), or nodes 3-5 failed (the quorum is down).
func nodesFor(h quorumHealth) []NodeResult {
	switch h {
	case quorumUp:
		return []NodeResult{{Node: 0, Outcome: Granted}, {Node: 1, Outcome: Granted}, {Node: 2, Outcome: Granted}, {Node: 3, Outcome: Granted}, {Node: 4, Outcome: Granted}}
	case quorumDown:
		return []NodeResult{{Node: 0, Outcome: Granted}, {Node: 1, Outcome: Granted}, {Node: 2, Outcome: TimedOut}, {Node: 3, Outcome: TimedOut}, {Node: 4, Outcome: Failed}}
	}
	return nil
}

// TestBreakerMinority: with two of five nodes cut off, attempts that fail
// because a third node is slow now and then never open the breaker (it is
// not down); three nodes failing in a row do.
func TestBreakerMinority(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	b := newBreaker(3, time.Second, 5, 3, func() time.Time { return now })
	minority := func(slow int) []NodeResult {
		out := []NodeResult{{Node: 0, Outcome: Granted}, {Node: 1, Outcome: Granted}, {Node: 2, Outcome: Granted},
			{Node: 3, Outcome: TimedOut}, {Node: 4, Outcome: TimedOut}}
		if slow >= 0 {
			out[slow].Outcome = TimedOut
		}
		return out
	}
	for i := range 50 {
		h, nodes := quorumUp, minority(-1)
		if i%2 == 1 { // every other attempt, one of the three is slow
			h, nodes = quorumDown, minority(i%3)
		}
		if p, _ := b.admit(); p != passNormal {
			t.Fatalf("attempt %d: got pass %d, want passNormal: a minority outage must not open the breaker", i, p)
		}
		if state, _ := b.done(passNormal, h, nodes); state != BreakerClosed {
			t.Fatalf("attempt %d: got %v, want closed", i, state)
		}
	}
	// Node 3 (index 2) now fails three times in a row: three nodes are down.
	var state BreakerState
	for range 3 {
		b.admit()
		state, _ = b.done(passNormal, quorumDown, minority(2))
	}
	if state != BreakerOpen {
		t.Fatalf("got %v, want open once three of five nodes are down", state)
	}
}

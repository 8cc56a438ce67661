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
	open := []step{ // three unavailable attempts in a row open it
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
		{"a quorum answering resets the count", []step{
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
			b := newBreaker(3, cooldown, func() time.Time { return now })
			for i, s := range tc.steps {
				now = now.Add(s.advance)
				if !s.report {
					p, state := b.admit()
					if p != s.want || state != s.state {
						t.Fatalf("step %d admit: got pass %d in state %v, want pass %d in %v", i, p, state, s.want, s.state)
					}
					continue
				}
				state, changed := b.done(s.p, s.h)
				if state != s.state || changed != s.changed {
					t.Fatalf("step %d done(%d, %d): got %v changed=%v, want %v changed=%v", i, s.p, s.h, state, changed, s.state, s.changed)
				}
			}
		})
	}
}

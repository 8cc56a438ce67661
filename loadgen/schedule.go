package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Stage is one leg of a load profile. Over Duration the target rate moves
// linearly from the previous stage's rate to Rate; the first stage holds Rate
// for its whole Duration. A zero-length stage is a step: it changes the rate
// the next stage ramps from without taking time.
type Stage struct {
	Duration time.Duration
	Rate     float64 // operations per second
}

// ParseRate parses "500" (per second) or "500/1s", "50/100ms": operations per
// period, returned per second.
func ParseRate(s string) (float64, error) {
	num, per, hasPer := strings.Cut(strings.TrimSpace(s), "/")
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("loadgen: rate %q: want a number like 500 or 500/1s", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("loadgen: rate %q is negative", s)
	}
	if !hasPer {
		return n, nil
	}
	d, err := time.ParseDuration(per)
	if err != nil {
		d, err = time.ParseDuration("1" + per) // "500/s"
	}
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("loadgen: rate %q: period must be a positive duration like 1s", s)
	}
	return n / d.Seconds(), nil
}

// ParseStages parses "30s:500,60s:2000,30s:0" into stages.
func ParseStages(s string) ([]Stage, error) {
	var out []Stage
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		ds, rs, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("loadgen: stage %q: want DURATION:RATE like 30s:500", part)
		}
		d, err := time.ParseDuration(ds)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("loadgen: stage %q: bad duration %q", part, ds)
		}
		r, err := ParseRate(rs)
		if err != nil {
			return nil, fmt.Errorf("loadgen: stage %q: %w", part, err)
		}
		out = append(out, Stage{Duration: d, Rate: r})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("loadgen: no stages in %q", s)
	}
	return out, nil
}

// FormatStages is the inverse of ParseStages.
func FormatStages(st []Stage) string {
	parts := make([]string, len(st))
	for i, s := range st {
		parts[i] = fmt.Sprintf("%s:%s", s.Duration, strconv.FormatFloat(s.Rate, 'f', -1, 64))
	}
	return strings.Join(parts, ",")
}

// Shard selects this load machine's share of a run split across M machines
// ("--worker i/M"): it runs the global operations i, i+M, i+2M, … and uses the
// keys whose index is i modulo M. The zero value means the whole run.
type Shard struct {
	Index, Count int
}

// ParseShard parses "i/M" with 0 <= i < M.
func ParseShard(s string) (Shard, error) {
	is, ms, ok := strings.Cut(strings.TrimSpace(s), "/")
	i, err1 := strconv.Atoi(is)
	m, err2 := strconv.Atoi(ms)
	if !ok || err1 != nil || err2 != nil {
		return Shard{}, fmt.Errorf("loadgen: worker %q: want i/M like 0/3", s)
	}
	if m < 1 || i < 0 || i >= m {
		return Shard{}, fmt.Errorf("loadgen: worker %q: need 0 <= i < M", s)
	}
	return Shard{Index: i, Count: m}, nil
}

func (s Shard) norm() Shard {
	if s.Count < 1 {
		return Shard{Index: 0, Count: 1}
	}
	return s
}

// String renders the shard as "i/M".
func (s Shard) String() string {
	s = s.norm()
	return fmt.Sprintf("%d/%d", s.Index, s.Count)
}

// Schedule is an open-loop load profile: the intended start time of every
// operation is fixed in advance, whatever the target does.
type Schedule struct {
	stages []plannedStage
	shard  Shard
	global uint64 // operations in the whole (unsharded) run
	dur    time.Duration
}

type plannedStage struct {
	start  float64 // seconds from the run start
	dur    float64 // seconds
	r0, r1 float64 // rate at the start and end of the stage
	n0     float64 // cumulative operations before the stage
	n      float64 // operations during the stage
}

// NewSchedule plans the stages for one shard.
func NewSchedule(stages []Stage, shard Shard) (*Schedule, error) {
	if len(stages) == 0 {
		return nil, errors.New("loadgen: schedule needs at least one stage")
	}
	s := &Schedule{shard: shard.norm()}
	var t, n float64
	prev := stages[0].Rate
	for i, st := range stages {
		if st.Duration < 0 || st.Rate < 0 || math.IsNaN(st.Rate) || math.IsInf(st.Rate, 0) {
			return nil, fmt.Errorf("loadgen: stage %d: duration and rate must be >= 0", i+1)
		}
		d := st.Duration.Seconds()
		p := plannedStage{start: t, dur: d, r0: prev, r1: st.Rate, n0: n}
		p.n = (p.r0 + p.r1) / 2 * d
		s.stages = append(s.stages, p)
		t += d
		n += p.n
		s.dur += st.Duration
		prev = st.Rate
	}
	// Operations sit at the times where the cumulative count is an integer,
	// strictly before the end; a count like 499.9999999 is 500 up to float noise.
	s.global = uint64(math.Ceil(n - 1e-6))
	if n < 1e-6 {
		s.global = 0
	}
	return s, nil
}

// ConstantSchedule is a single stage at rate for d.
func ConstantSchedule(rate float64, d time.Duration, shard Shard) (*Schedule, error) {
	return NewSchedule([]Stage{{Duration: d, Rate: rate}}, shard)
}

// Duration is the length of the whole profile.
func (s *Schedule) Duration() time.Duration { return s.dur }

// Len is the number of operations this shard runs.
func (s *Schedule) Len() uint64 {
	sh := s.shard
	if s.global <= uint64(sh.Index) {
		return 0
	}
	return (s.global-uint64(sh.Index)-1)/uint64(sh.Count) + 1
}

// Offset returns the intended start of this shard's k-th operation (0-based)
// as an offset from the run start; ok is false past the end of the schedule.
func (s *Schedule) Offset(k uint64) (off time.Duration, ok bool) {
	n := uint64(s.shard.Index) + k*uint64(s.shard.Count)
	if n >= s.global {
		return 0, false
	}
	return s.globalOffset(n), true
}

func (s *Schedule) globalOffset(n uint64) time.Duration {
	x := float64(n)
	// The last stage whose first operation is at or before x.
	i := sort.Search(len(s.stages), func(i int) bool { return s.stages[i].n0 > x }) - 1
	// Skip stages that carry no operations (zero rate or zero length).
	for i > 0 && s.stages[i].n <= 0 {
		i--
	}
	if i < 0 {
		i = 0
	}
	p := s.stages[i]
	m := x - p.n0
	var t float64
	switch {
	case m <= 0:
		t = 0
	case p.r0 == p.r1:
		t = m / p.r0
	default:
		// Solve r0·t + a·t² = m with a = (r1-r0)/(2·dur); this form stays
		// stable for ramps up, down and from zero.
		a := (p.r1 - p.r0) / (2 * p.dur)
		disc := p.r0*p.r0 + 4*a*m
		if disc < 0 {
			disc = 0
		}
		t = 2 * m / (p.r0 + math.Sqrt(disc))
	}
	if t > p.dur {
		t = p.dur
	}
	return time.Duration((p.start + t) * float64(time.Second))
}

// RateAt is the whole run's target rate (all shards) at offset t.
func (s *Schedule) RateAt(t time.Duration) float64 {
	x := t.Seconds()
	for _, p := range s.stages {
		if p.dur > 0 && x >= p.start && x < p.start+p.dur {
			return p.r0 + (p.r1-p.r0)*(x-p.start)/p.dur
		}
	}
	return 0
}

// ShardRateAt is this shard's share of RateAt.
func (s *Schedule) ShardRateAt(t time.Duration) float64 {
	return s.RateAt(t) / float64(s.shard.Count)
}

// Pace emits this shard's operations in order at their intended times,
// waiting on clk, until the schedule ends, stop is closed, or emit returns
// false. It returns the number of operations emitted. The pacer sleeps only
// when it is ahead of the schedule; when it is behind it emits at once and
// the caller sees the lateness in the intended time.
func (s *Schedule) Pace(ctx context.Context, clk Clock, start time.Time, stop <-chan struct{}, emit func(k uint64, intended time.Time) bool) uint64 {
	var timer Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var now time.Time
	for k := uint64(0); ; k++ {
		off, ok := s.Offset(k)
		if !ok {
			return k
		}
		due := start.Add(off)
		if due.After(now) {
			now = clk.Now()
			if wait := due.Sub(now); wait > 0 {
				if timer == nil {
					timer = clk.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-timer.C():
				case <-stop:
					return k
				case <-ctx.Done():
					return k
				}
				now = due
			}
		}
		select {
		case <-stop:
			return k
		case <-ctx.Done():
			return k
		default:
		}
		if !emit(k, due) {
			return k + 1
		}
	}
}

// Clock is the time source of the pacer and the engine; tests substitute a
// fake one.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the engine uses.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

// SystemClock is the real clock (monotonic readings included).
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a real timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return &sysTimer{t: time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (t *sysTimer) C() <-chan time.Time   { return t.t.C }
func (t *sysTimer) Reset(d time.Duration) { t.t.Reset(d) }
func (t *sysTimer) Stop()                 { t.t.Stop() }

package loadgen

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"
)

// fakeClock is a virtual clock that jumps forward whenever someone waits on
// it: a timer fires at once, with the clock advanced to its deadline. It fits
// a single waiting goroutine such as the pacer.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

type fakeTimer struct {
	c  *fakeClock
	ch chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }
func (t *fakeTimer) Stop() {
	select {
	case <-t.ch:
	default:
	}
}

func (t *fakeTimer) Reset(d time.Duration) {
	t.Stop()
	t.c.mu.Lock()
	if d > 0 {
		t.c.now = t.c.now.Add(d)
	}
	now := t.c.now
	t.c.mu.Unlock()
	t.ch <- now
}

// paceAll runs the pacer against a fake clock and returns every intended
// offset and the clock reading at each emit.
func paceAll(t *testing.T, s *Schedule) (intended, emittedAt []time.Duration) {
	t.Helper()
	clk := newFakeClock()
	start := clk.Now()
	n := s.Pace(context.Background(), clk, start, nil, func(k uint64, at time.Time) bool {
		if k != uint64(len(intended)) {
			t.Fatalf("emit k = %d, want %d", k, len(intended))
		}
		intended = append(intended, at.Sub(start))
		emittedAt = append(emittedAt, clk.Now().Sub(start))
		return true
	})
	if n != uint64(len(intended)) {
		t.Fatalf("Pace returned %d, emitted %d", n, len(intended))
	}
	return intended, emittedAt
}

func mustSchedule(t *testing.T, spec string, shard Shard) *Schedule {
	t.Helper()
	st, err := ParseStages(spec)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSchedule(st, shard)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func near(a, b time.Duration) bool {
	d := a - b
	return d >= -time.Microsecond && d <= time.Microsecond
}

func TestScheduleConstantRate(t *testing.T) {
	s, err := ConstantSchedule(500, time.Second, Shard{})
	if err != nil {
		t.Fatal(err)
	}
	got, at := paceAll(t, s)
	if len(got) != 500 || s.Len() != 500 {
		t.Fatalf("got %d ops (Len %d), want 500", len(got), s.Len())
	}
	for k, off := range got {
		want := time.Duration(k) * 2 * time.Millisecond
		if !near(off, want) {
			t.Fatalf("op %d intended at %v, want %v", k, off, want)
		}
		// The pacer waits for each op's time; with a virtual clock nothing is late.
		if !near(at[k], want) {
			t.Fatalf("op %d emitted at %v, want %v", k, at[k], want)
		}
	}
}

func TestScheduleStagesRampAndCounts(t *testing.T) {
	// hold 100/s for 1s, ramp 100→300 over 1s, ramp 300→0 over 1s.
	s := mustSchedule(t, "1s:100,1s:300,1s:0", Shard{})
	got, _ := paceAll(t, s)
	perSecond := make([]int, 3)
	for i, off := range got {
		if i > 0 && off < got[i-1] {
			t.Fatalf("op %d at %v before op %d at %v", i, off, i-1, got[i-1])
		}
		perSecond[int(off/time.Second)]++
	}
	want := []int{100, 200, 150} // ∫rate over each second
	for i := range want {
		if perSecond[i] != want[i] {
			t.Errorf("second %d: got %d ops, want %d", i, perSecond[i], want[i])
		}
	}
	// Closed form in the ramp: 100t + 100t² = m.
	for _, m := range []int{1, 50, 150, 199} {
		tt := (-100 + math.Sqrt(100*100+4*100*float64(m))) / 200
		want := time.Second + time.Duration(tt*float64(time.Second))
		if g := got[100+m]; !near(g, want) {
			t.Errorf("ramp op %d at %v, want %v", m, g, want)
		}
	}
	if r := s.RateAt(1500 * time.Millisecond); math.Abs(r-200) > 1e-9 {
		t.Errorf("RateAt(1.5s) = %v, want 200", r)
	}
}

func TestScheduleTable(t *testing.T) {
	for _, tc := range []struct {
		spec  string
		count int
		dur   time.Duration
	}{
		{"2s:10", 20, 2 * time.Second},
		{"1s:100,0s:500,1s:500", 600, 2 * time.Second}, // a step
		{"1s:0,1s:100", 50, 2 * time.Second},           // idle, then a ramp from zero
		{"1s:0", 0, time.Second},
		{"500ms:3", 2, 500 * time.Millisecond}, // ops at 0 and 333ms
	} {
		t.Run(tc.spec, func(t *testing.T) {
			s := mustSchedule(t, tc.spec, Shard{})
			got, _ := paceAll(t, s)
			if len(got) != tc.count || s.Len() != uint64(tc.count) {
				t.Errorf("got %d ops (Len %d), want %d", len(got), s.Len(), tc.count)
			}
			if s.Duration() != tc.dur {
				t.Errorf("Duration = %v, want %v", s.Duration(), tc.dur)
			}
			for _, off := range got {
				if off < 0 || off >= tc.dur {
					t.Errorf("op at %v outside [0, %v)", off, tc.dur)
				}
			}
		})
	}
}

func TestScheduleRampFromZero(t *testing.T) {
	s := mustSchedule(t, "1s:0,1s:100", Shard{})
	got, _ := paceAll(t, s)
	for m, off := range got {
		want := time.Second + time.Duration(math.Sqrt(float64(m)/50)*float64(time.Second))
		if !near(off, want) {
			t.Fatalf("op %d at %v, want %v", m, off, want)
		}
	}
}

func TestScheduleShardsPartitionTheRun(t *testing.T) {
	full := mustSchedule(t, "1s:90,1s:30", Shard{})
	all, _ := paceAll(t, full)
	var union []time.Duration
	var total uint64
	for i := 0; i < 4; i++ {
		s := mustSchedule(t, "1s:90,1s:30", Shard{Index: i, Count: 4})
		got, _ := paceAll(t, s)
		total += s.Len()
		for k, off := range got {
			if want := all[i+4*k]; off != want {
				t.Fatalf("shard %d op %d at %v, want %v", i, k, off, want)
			}
		}
		union = append(union, got...)
		if r := s.ShardRateAt(500 * time.Millisecond); math.Abs(r-22.5) > 1e-9 {
			t.Errorf("shard rate = %v, want 22.5", r)
		}
	}
	if len(union) != len(all) || total != uint64(len(all)) {
		t.Errorf("shards ran %d ops (Len sum %d), want %d", len(union), total, len(all))
	}
}

func TestPaceStops(t *testing.T) {
	s, _ := ConstantSchedule(100, 10*time.Second, Shard{})
	clk := newFakeClock()
	stop := make(chan struct{})
	n := s.Pace(context.Background(), clk, clk.Now(), stop, func(k uint64, _ time.Time) bool {
		if k == 9 {
			close(stop)
		}
		return true
	})
	if n != 10 {
		t.Errorf("emitted %d after stop at the 10th, want 10", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n := s.Pace(ctx, clk, clk.Now(), nil, func(uint64, time.Time) bool { return true }); n != 0 {
		t.Errorf("emitted %d with a cancelled context, want 0", n)
	}
}

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"500", 500, true},
		{"500/1s", 500, true},
		{"500/s", 500, true},
		{"50/100ms", 500, true},
		{"60/1m", 1, true},
		{"0", 0, true},
		{"2.5", 2.5, true},
		{"-1", 0, false},
		{"abc", 0, false},
		{"5/0s", 0, false},
		{"5/x", 0, false},
	} {
		got, err := ParseRate(tc.in)
		if (err == nil) != tc.ok || (tc.ok && math.Abs(got-tc.want) > 1e-9) {
			t.Errorf("ParseRate(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseStagesAndShard(t *testing.T) {
	st, err := ParseStages("30s:500, 60s:2000/1s,30s:0")
	if err != nil {
		t.Fatal(err)
	}
	want := []Stage{{30 * time.Second, 500}, {time.Minute, 2000}, {30 * time.Second, 0}}
	if len(st) != 3 || st[0] != want[0] || st[1] != want[1] || st[2] != want[2] {
		t.Errorf("got %v, want %v", st, want)
	}
	if got := FormatStages(st); got != "30s:500,1m0s:2000,30s:0" {
		t.Errorf("FormatStages = %q", got)
	}
	for _, bad := range []string{"", "30s", "x:5", "30s:-1", "-1s:5"} {
		if _, err := ParseStages(bad); err == nil {
			t.Errorf("ParseStages(%q): got nil error", bad)
		}
	}
	for _, tc := range []struct {
		in string
		ok bool
	}{{"0/1", true}, {"2/3", true}, {"3/3", false}, {"-1/2", false}, {"1", false}, {"a/b", false}, {"0/0", false}} {
		if _, err := ParseShard(tc.in); (err == nil) != tc.ok {
			t.Errorf("ParseShard(%q) error = %v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}

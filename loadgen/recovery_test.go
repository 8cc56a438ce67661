package loadgen

import (
	"math"
	"testing"
	"time"
)

// seriesOf builds a report of one-second intervals with these acquire p99s
// (ms; NaN: no acquisition) and reserved counts out of 100 operations each.
func seriesOf(p99 []float64, reserved []int64) *Report {
	n := len(p99)
	r := &Report{}
	s := &r.Series
	s.T = make([]float64, n)
	s.Outcomes = map[string][]int64{Reserved.String(): make([]int64, n), Overloaded.String(): make([]int64, n)}
	col := make([]optFloat, n)
	for i := range n {
		s.T[i] = float64(i)
		col[i] = optFloat(p99[i])
		s.Outcomes[Reserved.String()][i] = reserved[i]
		s.Outcomes[Overloaded.String()][i] = 100 - reserved[i]
	}
	s.Latency = map[string]map[string][]optFloat{TagAcquire: {"p99": col}}
	return r
}

func TestRecovery(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name     string
		p99      []float64
		reserved []int64
		after    time.Duration
		want     time.Duration
		ok       bool
	}{
		{"back at once", []float64{50, 50, 3, 3, 3}, []int64{100, 100, 100, 100, 100}, 2 * time.Second, 0, true},
		{"two slow seconds after the spike", []float64{50, 50, 40, 30, 3, 3}, []int64{100, 100, 100, 100, 100, 100}, 2 * time.Second, 2 * time.Second, true},
		{"a relapse restarts the clock", []float64{50, 3, 30, 3, 3}, []int64{100, 100, 100, 100, 100}, time.Second, 2 * time.Second, true},
		{"fast but shedding is not back", []float64{50, 3, 3, 3, 3}, []int64{100, 50, 50, 100, 100}, time.Second, 2 * time.Second, true},
		{"an interval without acquisitions is not back", []float64{50, nan, 3, 3}, []int64{100, 0, 100, 100}, time.Second, time.Second, true},
		{"never back", []float64{50, 3, 3, 30}, []int64{100, 100, 100, 100}, time.Second, 0, false},
		{"nothing after the moment", []float64{3, 3}, []int64{100, 100}, 5 * time.Second, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := seriesOf(tc.p99, tc.reserved).Recovery(tc.after, 10*time.Millisecond, 0.99)
			if got != tc.want || ok != tc.ok {
				t.Errorf("Recovery = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestRecoveryLeavesTheDrainOut: the operations still in flight when the
// schedule ends finish in a last short interval of target rate 0; that
// interval is not judged, and one still within the schedule is.
func TestRecoveryLeavesTheDrainOut(t *testing.T) {
	r := seriesOf([]float64{50, 3, 3, 18}, []int64{100, 100, 100, 5})
	r.Series.TargetRate = []float64{300, 100, 100, 0}
	if got, ok := r.Recovery(time.Second, 10*time.Millisecond, 0.99); got != 0 || !ok {
		t.Errorf("with a slow drain: Recovery = %v, %v; want 0, true", got, ok)
	}
	r.Series.TargetRate[3] = 100
	if _, ok := r.Recovery(time.Second, 10*time.Millisecond, 0.99); ok {
		t.Error("a slow last interval within the schedule was not judged")
	}
}

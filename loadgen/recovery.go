package loadgen

import (
	"math"
	"time"
)

// Recovery says how long a run took, after a moment of it (typically the
// end of a load spike), to be back within an SLO for good: the time from
// after to the start of the first interval from which every interval kept
// its acquire p99 under maxP99 and reserved at least minReserved of the
// operations whose turn came (late ones included, so a generator that
// cannot keep up is not mistaken for a service that recovered). ok is false
// when the run's last interval is still outside the SLO, or when no
// interval starts at or after after: the run never recovered, as far as it
// shows.
//
// The resolution is the run's interval (one second by default). An interval
// with no acquisition at all is outside the SLO: nothing was served. The
// drain after the schedule's end (the trailing intervals with a target rate
// of 0, a few milliseconds in which the operations still in flight end) is
// not judged: its handful of operations make no p99.
func (r *Report) Recovery(after, maxP99 time.Duration, minReserved float64) (d time.Duration, ok bool) {
	s := r.Series
	p99 := s.Latency[TagAcquire]["p99"]
	within := func(i int) bool {
		if i >= len(p99) {
			return false
		}
		v := float64(p99[i])
		if math.IsNaN(v) || v >= float64(maxP99)/float64(time.Millisecond) {
			return false
		}
		var all int64
		for _, col := range s.Outcomes {
			all += col[i]
		}
		return all > 0 && float64(s.Outcomes[Reserved.String()][i]) >= minReserved*float64(all)
	}
	end := len(s.T) // past the schedule's last interval
	for end > 1 && len(s.TargetRate) == len(s.T) && s.TargetRate[end-1] == 0 {
		end--
	}
	from := -1 // the first interval of the run's within-SLO tail
	for i := end - 1; i >= 0; i-- {
		if s.T[i] < after.Seconds() || !within(i) {
			break
		}
		from = i
	}
	if from < 0 {
		return 0, false
	}
	return max(0, time.Duration((s.T[from]-after.Seconds())*float64(time.Second))).Round(time.Millisecond), true
}

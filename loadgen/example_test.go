package loadgen_test

import (
	"fmt"
	"time"

	"github.com/redlocklab/redlocklab/loadgen"
)

// A ramp from 0 to 4 operations per second over two seconds: the intended
// start of every operation is fixed before the run, whatever the target does.
func ExampleSchedule() {
	stages, _ := loadgen.ParseStages("0s:0,2s:4")
	s, _ := loadgen.NewSchedule(stages, loadgen.Shard{})
	for k := uint64(0); ; k++ {
		off, ok := s.Offset(k)
		if !ok {
			break
		}
		fmt.Println(off.Round(time.Millisecond))
	}
	// Output:
	// 0s
	// 1s
	// 1.414s
	// 1.732s
}

func ExampleParseThreshold() {
	for _, expr := range []string{"acquire.p99<20ms", "safety.lost_updates==0", "outcomes.error<1%", "acquire.p99<20"} {
		t, err := loadgen.ParseThreshold(expr)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(t.Metric, t.Op, t.Value)
	}
	// Output:
	// acquire.p99 < 2e+07
	// safety.lost_updates == 0
	// outcomes.error < 0.01
	// loadgen: threshold "acquire.p99<20": acquire.p99 is a latency: give a unit, like 20ms or 1.5s
}

package loadspec

import "testing"

func TestParseStat(t *testing.T) {
	for in, want := range map[string]float64{"p50": 50, "p9": 9, "p90": 90, "p99": 99, "p999": 99.9, "p9999": 99.99, "p99.5": 99.5, "max": 100, "p100": 100, "min": -1, "mean": -2} {
		if got, err := ParseStat(in); err != nil || got != want {
			t.Errorf("ParseStat(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestNodeIndex(t *testing.T) {
	for tag, want := range map[string]int{"node1": 0, "node12": 11, "node1024": 1023} {
		if got, ok := NodeIndex(tag); !ok || got != want {
			t.Errorf("NodeIndex(%q) = %d, %v; want %d, true", tag, got, ok, want)
		}
	}
	for _, tag := range []string{"node0", "node01", "node1025", "node", "nodex", "acquire"} {
		if got, ok := NodeIndex(tag); ok {
			t.Errorf("NodeIndex(%q) = %d, true; want false", tag, got)
		}
	}
}

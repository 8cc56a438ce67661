package loadgen

import (
	"testing"
	"time"
)

func TestParseHold(t *testing.T) {
	for _, tc := range []struct {
		in       string
		min, max time.Duration
		ok       bool
	}{
		{"2s", 2 * time.Second, 2 * time.Second, true},
		{"const:500ms", 500 * time.Millisecond, 500 * time.Millisecond, true},
		{"uniform:1s:3s", time.Second, 3 * time.Second, true},
		{"0s", 0, 0, true},
		{"uniform:3s:1s", 0, 0, false},
		{"-1s", 0, 0, false},
		{"2", 0, 0, false},
		{"zipf:1s", 0, 0, false},
	} {
		h, err := ParseHold(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("%q: got error %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && (h.Min != tc.min || h.Max != tc.max) {
			t.Errorf("%q: got [%v, %v], want [%v, %v]", tc.in, h.Min, h.Max, tc.min, tc.max)
		}
		if tc.ok {
			if back, err := ParseHold(h.String()); err != nil || back != h {
				t.Errorf("%q: String %q does not parse back (%v)", tc.in, h.String(), err)
			}
			for range 100 {
				if d := h.Next(); d < h.Min || d > h.Max {
					t.Fatalf("%q: drew %v outside [%v, %v]", tc.in, d, h.Min, h.Max)
				}
			}
		}
	}
}

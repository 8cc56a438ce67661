package prose

import (
	"testing"
	"time"
)

func TestList(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{List([]int{1, 2, 3}), "1, 2, 3"},
		{List([]string{"a"}), "a"},
		{List([]float64{12.5, 25}), "12.5, 25"},
		{List([]time.Duration{time.Second}), "1s"},
		{List([]int(nil)), ""},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

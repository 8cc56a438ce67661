package loadspec

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// HoldSpec is the time a reservation spends inside its critical section,
// between reading the stock and writing it back: "D" or "const:D" for a
// constant, "uniform:A:B" for a uniform duration in [A, B]. The zero value
// holds for no extra time. A hold is what makes a second grant able to
// overlap a first one: without it the critical section lasts a few
// milliseconds.
type HoldSpec struct {
	Min, Max time.Duration
}

// ParseHold parses a hold distribution.
func ParseHold(s string) (HoldSpec, error) {
	s = strings.TrimSpace(s)
	bad := fmt.Errorf("loadgen: hold %q: want D, const:D or uniform:MIN:MAX with 0 <= MIN <= MAX (durations like 2s or 500ms)", s)
	parts := strings.Split(s, ":")
	var h HoldSpec
	var err error
	switch {
	case len(parts) == 1:
		h.Min, err = time.ParseDuration(parts[0])
		h.Max = h.Min
	case len(parts) == 2 && parts[0] == "const":
		h.Min, err = time.ParseDuration(parts[1])
		h.Max = h.Min
	case len(parts) == 3 && parts[0] == "uniform":
		h.Min, err = time.ParseDuration(parts[1])
		if err == nil {
			h.Max, err = time.ParseDuration(parts[2])
		}
	default:
		return HoldSpec{}, bad
	}
	if err != nil || h.Min < 0 || h.Max < h.Min {
		return HoldSpec{}, bad
	}
	return h, nil
}

// String renders the spec in the form ParseHold reads.
func (h HoldSpec) String() string {
	if h.Min == h.Max {
		return h.Min.String()
	}
	return fmt.Sprintf("uniform:%s:%s", h.Min, h.Max)
}

// IsZero reports whether the spec adds no hold.
func (h HoldSpec) IsZero() bool { return h.Max <= 0 }

// Next draws a hold.
func (h HoldSpec) Next() time.Duration {
	if h.Max <= h.Min {
		return h.Min
	}
	return h.Min + rand.N(h.Max-h.Min+1)
}

// Sleep holds for a drawn duration, or until ctx ends: the work of a critical
// section, which a cancelled request abandons (unlike a pause).
func (h HoldSpec) Sleep(ctx context.Context) {
	d := h.Next()
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

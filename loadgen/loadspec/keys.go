package loadspec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// KeySpec describes which SKU each operation reserves:
//
//	uniform:N        every key equally likely
//	zipf:N:θ         key rank r with probability ∝ 1/(r+1)^θ; θ < 1 uses the
//	                 YCSB (Gray et al.) generator, θ > 1 Go's rejection sampler
//	hot:N:F[:H]      a fraction F of operations go to H hot keys (default 1),
//	                 the rest uniformly to the other N-H keys
//
// Key 0 is always the hottest.
type KeySpec struct {
	Kind  string // "uniform", "zipf" or "hot"
	N     int
	Theta float64 // zipf
	Frac  float64 // hot: fraction of operations on the hot keys
	Hot   int     // hot: number of hot keys
}

// ParseKeys parses a key distribution.
func ParseKeys(s string) (KeySpec, error) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	bad := func(format string, a ...any) (KeySpec, error) {
		return KeySpec{}, fmt.Errorf("loadgen: keys %q: "+format, append([]any{s}, a...)...)
	}
	if len(parts) < 2 {
		return bad("want uniform:N, zipf:N:θ or hot:N:fraction")
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n < 1 {
		return bad("key count %q must be a positive integer", parts[1])
	}
	spec := KeySpec{Kind: parts[0], N: n}
	switch parts[0] {
	case "uniform":
		if len(parts) != 2 {
			return bad("want uniform:N")
		}
	case "zipf":
		if len(parts) != 3 {
			return bad("want zipf:N:θ, like zipf:1000:0.99")
		}
		th, err := strconv.ParseFloat(parts[2], 64)
		if err != nil || !(th > 0) || math.IsInf(th, 0) {
			return bad("θ %q must be a number > 0", parts[2])
		}
		if th == 1 {
			return bad("θ = 1 is a singular point of the generator; use 0.99 or 1.01")
		}
		spec.Theta = th
	case "hot":
		if len(parts) != 3 && len(parts) != 4 {
			return bad("want hot:N:fraction[:hotkeys], like hot:1000:0.9")
		}
		f, err := strconv.ParseFloat(parts[2], 64)
		if err != nil || f < 0 || f > 1 {
			return bad("fraction %q must be within [0,1]", parts[2])
		}
		spec.Frac, spec.Hot = f, 1
		if len(parts) == 4 {
			h, err := strconv.Atoi(parts[3])
			if err != nil || h < 1 {
				return bad("hot key count %q must be a positive integer", parts[3])
			}
			spec.Hot = h
		}
		if spec.Hot > n || (spec.Hot == n && f < 1) {
			return bad("need fewer hot keys (%d) than keys (%d)", spec.Hot, n)
		}
	default:
		return bad("unknown distribution %q (uniform, zipf, hot)", parts[0])
	}
	return spec, nil
}

// String renders the spec in the form ParseKeys reads.
func (k KeySpec) String() string {
	switch k.Kind {
	case "zipf":
		return fmt.Sprintf("zipf:%d:%s", k.N, strconv.FormatFloat(k.Theta, 'f', -1, 64))
	case "hot":
		s := fmt.Sprintf("hot:%d:%s", k.N, strconv.FormatFloat(k.Frac, 'f', -1, 64))
		if k.Hot != 1 {
			s += ":" + strconv.Itoa(k.Hot)
		}
		return s
	}
	return fmt.Sprintf("uniform:%d", k.N)
}

// HottestShare is the share of operations that go to the most requested
// key: 1/N for uniform, F/H for hot (or a cold key's share, when F is so
// small that a cold key gets more), 1/Σ r^-θ over r = 1..N for zipf.
func (k KeySpec) HottestShare() float64 {
	switch k.Kind {
	case "hot":
		share := k.Frac / float64(k.Hot)
		if cold := k.N - k.Hot; cold > 0 {
			share = max(share, (1-k.Frac)/float64(cold))
		}
		return share
	case "zipf":
		var sum float64
		for r := 1; r <= k.N; r++ {
			sum += math.Pow(float64(r), -k.Theta)
		}
		return 1 / sum
	}
	if k.N < 1 {
		return 0
	}
	return 1 / float64(k.N)
}

// QuantitySpec is the distribution of units per reservation: "N" or "const:N"
// for a constant, "uniform:A:B" for a uniform integer in [A, B].
type QuantitySpec struct {
	Min, Max int64
}

// ParseQuantity parses a quantity distribution.
func ParseQuantity(s string) (QuantitySpec, error) {
	s = strings.TrimSpace(s)
	bad := fmt.Errorf("loadgen: quantity %q: want N, const:N or uniform:MIN:MAX with 1 <= MIN <= MAX", s)
	parts := strings.Split(s, ":")
	var q QuantitySpec
	var err error
	switch {
	case len(parts) == 1:
		q.Min, err = strconv.ParseInt(parts[0], 10, 64)
		q.Max = q.Min
	case len(parts) == 2 && parts[0] == "const":
		q.Min, err = strconv.ParseInt(parts[1], 10, 64)
		q.Max = q.Min
	case len(parts) == 3 && parts[0] == "uniform":
		q.Min, err = strconv.ParseInt(parts[1], 10, 64)
		if err == nil {
			q.Max, err = strconv.ParseInt(parts[2], 10, 64)
		}
	default:
		return QuantitySpec{}, bad
	}
	if err != nil || q.Min < 1 || q.Max < q.Min {
		return QuantitySpec{}, bad
	}
	return q, nil
}

// String renders the spec in the form ParseQuantity reads.
func (q QuantitySpec) String() string {
	if q.Min == q.Max {
		return strconv.FormatInt(q.Min, 10)
	}
	return fmt.Sprintf("uniform:%d:%d", q.Min, q.Max)
}

// Next draws a quantity.
func (q QuantitySpec) Next(r *rand.Rand) int64 {
	if q.Max <= q.Min {
		if q.Min < 1 {
			return 1
		}
		return q.Min
	}
	return q.Min + r.Int64N(q.Max-q.Min+1)
}

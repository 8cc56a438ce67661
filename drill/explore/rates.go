package explore

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Harm is a kind of harm a guard can show in a schedule.
type Harm string

// The harms a rate is kept for.
const (
	// HarmLockViolation: two holders both inside their validity.
	HarmLockViolation Harm = "lock_violations"
	// HarmDoubleGrant: two holders at once, one of them past its validity
	// or not.
	HarmDoubleGrant Harm = "double_grants"
	// HarmLostUpdate: the protected stock lost units.
	HarmLostUpdate Harm = "lost_updates"
	// HarmUnavailable: more than the threshold of the requests found the
	// lock unavailable.
	HarmUnavailable Harm = "unavailable"
)

// Harms are the harms, in the order tables show them.
var Harms = []Harm{HarmLockViolation, HarmDoubleGrant, HarmLostUpdate, HarmUnavailable}

// words is how tables head each harm.
var words = map[Harm]string{
	HarmLockViolation: "lock violations", HarmDoubleGrant: "double grants", HarmLostUpdate: "lost updates", HarmUnavailable: "unavailable",
}

// Rate is k schedules with a harm out of n valid ones.
type Rate struct {
	K int `json:"k"`
	N int `json:"n"`
}

// Share is k/n (0 for none).
func (r Rate) Share() float64 {
	if r.N == 0 {
		return 0
	}
	return float64(r.K) / float64(r.N)
}

// Interval is the 95 % Wilson score interval of the share: it stays
// inside [0, 1] and says something even when k is 0 (the rule of three:
// about 3/n).
func (r Rate) Interval() (lo, hi float64) {
	if r.N == 0 {
		return 0, 1
	}
	const z = 1.959963984540054
	n, p := float64(r.N), r.Share()
	den := 1 + z*z/n
	mid := (p + z*z/(2*n)) / den
	half := z * math.Sqrt(p*(1-p)/n+z*z/(4*n*n)) / den
	return math.Max(0, mid-half), math.Min(1, mid+half)
}

// String reads "3/212 (1.4 %, 95 % CI 0.5–4.1 %)".
func (r Rate) String() string {
	lo, hi := r.Interval()
	return fmt.Sprintf("%d/%d (%s, %s–%s)", r.K, r.N, pct(r.Share()), pct(lo), pct(hi))
}

func pct(f float64) string {
	switch {
	case f == 0:
		return "0%"
	case f < 0.001:
		return fmt.Sprintf("%.2f%%", f*100)
	case f < 0.1:
		return fmt.Sprintf("%.1f%%", f*100)
	}
	return fmt.Sprintf("%.0f%%", f*100)
}

// Rates are, per guard and harm, the schedules that showed it out of the
// valid ones. Rates of runs with the same configuration add up (Merge).
type Rates struct {
	// Guards is the guards' order.
	Guards  []string                 `json:"guards"`
	ByGuard map[string]map[Harm]Rate `json:"by_guard"`
}

// NewRates starts empty rates over guards.
func NewRates(guards []string) *Rates {
	r := &Rates{Guards: slices.Clone(guards), ByGuard: map[string]map[Harm]Rate{}}
	for _, g := range guards {
		r.ByGuard[g] = map[Harm]Rate{}
	}
	return r
}

// Add counts a valid schedule's outcome.
func (r *Rates) Add(o *Outcome) {
	for _, g := range r.Guards {
		got, ok := o.Guards[g]
		if !ok {
			continue
		}
		for _, h := range Harms {
			rate := r.ByGuard[g][h]
			rate.N++
			if got.Has(h) {
				rate.K++
			}
			r.ByGuard[g][h] = rate
		}
	}
}

// Merge adds o's counts to r's.
func (r *Rates) Merge(o *Rates) {
	for _, g := range o.Guards {
		if !slices.Contains(r.Guards, g) {
			r.Guards = append(r.Guards, g)
			r.ByGuard[g] = map[Harm]Rate{}
		}
		for h, rate := range o.ByGuard[g] {
			mine := r.ByGuard[g][h]
			mine.K += rate.K
			mine.N += rate.N
			r.ByGuard[g][h] = mine
		}
	}
}

// WriteText writes the rate table.
func (r *Rates) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"guard", "valid"}
	for _, h := range Harms {
		head = append(head, words[h])
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, g := range r.Guards {
		n := 0
		for _, rate := range r.ByGuard[g] {
			n = max(n, rate.N)
		}
		row := []string{g, fmt.Sprint(n)}
		for _, h := range Harms {
			row = append(row, r.ByGuard[g][h].String())
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

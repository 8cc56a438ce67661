package loadgen

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// statusLine prints one line per interval: the achieved rate, in-flight,
// acquire p50/p99, the running outcome counts and double grants so far. On a
// terminal the line rewrites itself; elsewhere each interval is a new line.
type statusLine struct {
	w     io.Writer
	tty   bool
	start time.Time
	total [numOutcomes]int64
	late  int64
	b     strings.Builder
}

func newStatusLine(w io.Writer, tty bool, start time.Time) *statusLine {
	return &statusLine{w: w, tty: tty, start: start}
}

func (s *statusLine) Interval(iv *Interval) error {
	h := iv.Hists
	for i, c := range h.Outcomes {
		s.total[i] += c
	}
	s.late += h.LateStarts
	d := iv.End.Sub(iv.Start).Seconds()
	ended := h.Requests() - h.Outcomes[Late]
	rate := 0.0
	if d > 0 {
		rate = float64(ended) / d
	}
	b := &s.b
	b.Reset()
	if s.tty {
		b.WriteString("\r")
	}
	fmt.Fprintf(b, "%5.0fs  rate %.1f/s (target %.1f)  in-flight %d", iv.End.Sub(s.start).Seconds(), rate, iv.TargetRate, iv.InFlight)
	if h.Acquire.TotalCount() > 0 {
		v := atPercentiles(h.Acquire, 50, 99)
		fmt.Fprintf(b, "  acquire p50 %s p99 %s", fmtDur(v[0]), fmtDur(v[1]))
	} else if h.E2E.TotalCount() > 0 {
		v := atPercentiles(h.E2E, 50, 99)
		fmt.Fprintf(b, "  e2e p50 %s p99 %s", fmtDur(v[0]), fmtDur(v[1]))
	}
	b.WriteString(" |")
	for i, c := range s.total {
		if c > 0 || Outcome(i) == Reserved {
			fmt.Fprintf(b, " %s %d", outcomeNames[i], c)
		}
	}
	if s.late > 0 {
		fmt.Fprintf(b, " late-starts %d", s.late)
	}
	fmt.Fprintf(b, " | double grants %d", iv.DoubleGrants)
	if s.tty {
		b.WriteString("\x1b[K")
		if iv.Final {
			b.WriteString("\n")
		}
	} else {
		b.WriteString("\n")
	}
	_, err := io.WriteString(s.w, b.String())
	if err != nil {
		return nil // a closed terminal must not fail the run
	}
	return nil
}

func fmtDur(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	}
}

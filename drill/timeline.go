package drill

import (
	"fmt"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/redlocklab/redlocklab/loadgen"
)

// TimelineFile is a drill's one picture: every fault and every guard on
// one time axis.
const TimelineFile = "timeline.html"

// WriteTimeline draws the drill in dir (its result.json and history.jsonl)
// as timeline.html: each fault a band on its target's lane; one lane per
// guard with its availability per second, its grants, its double grants,
// its lock violations and its fenced rejections as marks, and its lost
// updates beside its name, linked to its report.html.
func WriteTimeline(dir string) error {
	res, err := ReadResult(dir)
	if err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(dir, HistoryFile))
	if err != nil {
		return fmt.Errorf("drill: %w", err)
	}
	recs, err := ReadRecords(f)
	f.Close()
	if err != nil {
		return err
	}
	data := timelineData(res, recs)
	out, err := os.Create(filepath.Join(dir, TimelineFile))
	if err != nil {
		return fmt.Errorf("drill: %w", err)
	}
	err = timelineTmpl.Execute(out, data)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("drill: timeline: %w", err)
	}
	return nil
}

// The picture's geometry, in SVG units.
const (
	tlLeft   = 280.0 // the lanes' names
	tlWidth  = 940.0
	tlFault  = 18.0 // a fault lane's height
	tlGuard  = 64.0 // a guard lane's height
	tlAxis   = 28.0
	tlMargin = 10.0
)

type tlBand struct {
	X, W         float64
	Label, Title string
}

type tlMark struct {
	X     float64
	Title string
}

type tlFaultLane struct {
	Name  string
	Y     float64
	Bands []tlBand
}

type tlGuardLane struct {
	Name, Link, Lost, Summary string
	Y                         float64
	// TickTop and TickBottom bound the grants' ticks, MarkY and FenceY
	// place the double grants and violations, and the fenced writes.
	TickTop, TickBottom, MarkY, FenceY float64
	// Avail is the availability polyline's points.
	Avail                                 string
	Grants, Doubles, Violations, Fenced   []tlMark
	NGrants, NDoubles, NViolations, NFenc int
}

type tlTick struct {
	X     float64
	Label string
}

type timeline struct {
	R                 *Result
	Width, Height     float64
	Left, Plot, Right float64
	TickEnd           float64
	Faults            []tlFaultLane
	// Shades are the spans when some fault was in force, each once.
	Shades []tlBand
	Guards []tlGuardLane
	Ticks  []tlTick
	AxisY  float64
}

// timelineData lays the drill out.
func timelineData(res *Result, recs Records) *timeline {
	end := int64(res.DurationS * 1e9)
	for _, h := range recs.Holds {
		end = max(end, h.ReleasedNs)
	}
	for _, f := range recs.Faults {
		end = max(end, f.AtNs)
	}
	if end <= 0 {
		end = 1
	}
	x := func(ns int64) float64 { return tlLeft + tlWidth*float64(max(ns, 0))/float64(end) }
	t := &timeline{R: res, Left: tlLeft, Plot: tlWidth}

	// Fault lanes, by target, in the order targets first appear.
	lanes := map[string]*tlFaultLane{}
	var order []string
	open := map[string]FaultRecord{}
	lane := func(f FaultRecord) *tlFaultLane {
		var name string
		switch {
		case f.Guard != "":
			name = "holder of " + f.Guard
		case f.EtcdMember > 0:
			name = "etcd member " + strconv.Itoa(f.EtcdMember)
		case len(f.Nodes) > 0:
			name = "node " + strconv.Itoa(f.Nodes[0])
		default:
			name = "lab"
		}
		if lanes[name] == nil {
			lanes[name] = &tlFaultLane{Name: name}
			order = append(order, name)
		}
		return lanes[name]
	}
	band := func(s FaultRecord, e int64) {
		l := lane(s)
		l.Bands = append(l.Bands, tlBand{X: x(s.AtNs), W: math.Max(2, x(e)-x(s.AtNs)), Label: s.Fault,
			Title: fmt.Sprintf("%s on %s, %.1fs to %.1fs", s.Fault, l.Name, float64(s.AtNs)/1e9, float64(e)/1e9)})
	}
	for _, f := range recs.Faults {
		switch f.Event {
		case "start":
			open[f.ID] = f
			lane(f)
		case "end":
			if s, ok := open[f.ID]; ok {
				band(s, f.AtNs)
				delete(open, f.ID)
			}
		}
	}
	for _, s := range open {
		band(s, end)
	}
	sort.SliceStable(order, func(i, j int) bool { return laneRank(order[i]) < laneRank(order[j]) })
	y := tlMargin
	for _, name := range order {
		l := lanes[name]
		l.Y = y
		y += tlFault
		t.Faults = append(t.Faults, *l)
	}
	y += tlMargin
	t.Shades = union(t.Faults)

	// Guard lanes.
	opsBy := map[string][]OpRecord{}
	for _, o := range recs.Ops {
		opsBy[o.Guard] = append(opsBy[o.Guard], o)
	}
	holdsBy := map[string][]HoldRecord{}
	for _, h := range recs.Holds {
		holdsBy[h.Guard] = append(holdsBy[h.Guard], h)
	}
	for _, g := range res.GuardOrder {
		gr := res.Guards[g]
		l := tlGuardLane{Name: g, Y: y, Link: filepath.Join(g, "run", "report.html"),
			TickTop: y + 46, TickBottom: y + 56, MarkY: y + 30, FenceY: y + 38}
		if gr != nil {
			l.Lost = fmt.Sprintf("lost %d units", gr.Counts.LostUpdates)
			if gr.Counts.LostUpdates == 0 {
				l.Lost = "data kept"
			}
			l.Summary = fmt.Sprintf("availability %.2f%%", gr.Availability*100)
		}
		for _, h := range holdsBy[g] {
			l.Grants = append(l.Grants, tlMark{X: x(h.GrantedNs)})
		}
		for _, d := range overlaps(holdsBy[g]) {
			m := tlMark{X: x(d.atNs), Title: fmt.Sprintf("%s at %.2fs on %s", map[bool]string{true: "lock violation", false: "double grant"}[d.violation], float64(d.atNs)/1e9, d.key)}
			if d.violation {
				l.Violations = append(l.Violations, m)
			} else {
				l.Doubles = append(l.Doubles, m)
			}
		}
		for _, o := range opsBy[g] {
			if o.Outcome == loadgen.Fenced.String() && o.EndedNs >= 0 {
				l.Fenced = append(l.Fenced, tlMark{X: x(o.EndedNs), Title: fmt.Sprintf("stale write fenced at %.2fs on %s", float64(o.EndedNs)/1e9, o.Key)})
			}
		}
		l.NGrants, l.NDoubles, l.NViolations, l.NFenc = len(l.Grants), len(l.Doubles), len(l.Violations), len(l.Fenced)
		l.Avail = availabilityLine(opsBy[g], end, func(ns int64) float64 { return x(ns) }, y+6, tlGuard-22)
		t.Guards = append(t.Guards, l)
		y += tlGuard
	}
	t.AxisY = y + 4
	t.TickEnd = t.AxisY + 5
	t.Right = tlLeft + tlWidth
	t.Width = t.Right + 20
	step := niceStep(float64(end) / 1e9)
	for s := 0.0; s <= float64(end)/1e9+1e-9; s += step {
		t.Ticks = append(t.Ticks, tlTick{X: x(int64(s * 1e9)), Label: strconv.FormatFloat(s, 'f', -1, 64) + "s"})
	}
	t.Height = t.AxisY + tlAxis
	return t
}

// union is the spans of the lanes' bands, overlapping ones merged.
func union(lanes []tlFaultLane) []tlBand {
	var all []tlBand
	for _, l := range lanes {
		all = append(all, l.Bands...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].X < all[j].X })
	var out []tlBand
	for _, b := range all {
		if n := len(out); n > 0 && b.X <= out[n-1].X+out[n-1].W {
			out[n-1].W = math.Max(out[n-1].W, b.X+b.W-out[n-1].X)
			continue
		}
		out = append(out, tlBand{X: b.X, W: b.W})
	}
	return out
}

// laneRank orders the fault lanes: nodes, etcd members, holders.
func laneRank(name string) int {
	n := 0
	if i := strings.LastIndexByte(name, ' '); i >= 0 {
		n, _ = strconv.Atoi(name[i+1:])
	}
	switch {
	case strings.HasPrefix(name, "node "):
		return n
	case strings.HasPrefix(name, "etcd "):
		return 1000 + n
	}
	return 2000
}

// overlap is the start of two holders at once on one key.
type overlap struct {
	atNs      int64
	key       string
	violation bool
}

// overlaps are the double grants of holds, each at the instant the second
// holder got the key while the first still held it; a violation when both
// were inside their validity then (as loadgen.HoldChecker counts them).
func overlaps(holds []HoldRecord) []overlap {
	byKey := map[string][]HoldRecord{}
	for _, h := range holds {
		byKey[h.Key] = append(byKey[h.Key], h)
	}
	var out []overlap
	for key, hs := range byKey {
		sort.Slice(hs, func(i, j int) bool { return hs[i].GrantedNs < hs[j].GrantedNs })
		for i := range hs {
			for j := i + 1; j < len(hs) && hs[j].GrantedNs < hs[i].ReleasedNs; j++ {
				if hs[j].Token == hs[i].Token {
					continue
				}
				at := hs[j].GrantedNs
				valid := at < min(hs[i].ValidUntilNs, hs[i].ReleasedNs) && at < min(hs[j].ValidUntilNs, hs[j].ReleasedNs)
				out = append(out, overlap{atNs: at, key: key, violation: valid})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].atNs < out[j].atNs })
	return out
}

// availabilityLine is the polyline of the share of operations answered by
// the service's logic, per second of when they were due, in a band of
// height h from top (100 % at top).
func availabilityLine(ops []OpRecord, end int64, x func(int64) float64, top, h float64) string {
	secs := int(end/1e9) + 1
	due, ok := make([]int, secs), make([]int, secs)
	for _, o := range ops {
		s := int(o.DueNs / 1e9)
		if s < 0 || s >= secs {
			continue
		}
		due[s]++
		switch o.Outcome {
		case loadgen.Unavailable.String(), loadgen.Overloaded.String(), loadgen.Error.String(), loadgen.Late.String():
		default:
			ok[s]++
		}
	}
	var pts []string
	for s := range secs {
		if due[s] == 0 {
			continue
		}
		share := float64(ok[s]) / float64(due[s])
		for _, at := range []int64{int64(s) * 1e9, min(int64(s+1)*1e9, end)} {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(at), top+h*(1-share)))
		}
	}
	return strings.Join(pts, " ")
}

// niceStep is a tick spacing for a span of s seconds: about ten ticks.
func niceStep(s float64) float64 {
	for _, step := range []float64{0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300} {
		if s/step <= 12 {
			return step
		}
	}
	return 600
}

var timelineTmpl = template.Must(template.New("timeline").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>drill {{.R.Drill}}: {{.R.Verdict}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:20px;margin:0 0 .3em}.pass{color:#067647}.fail{color:#b42318}.invalid{color:#b54708}
.legend span{display:inline-block;margin-right:1.2em}.sw{display:inline-block;width:12px;height:12px;vertical-align:-2px;margin-right:4px}
svg text{font:12px system-ui,sans-serif;fill:#344054}svg a text{fill:#1d4ed8;text-decoration:underline}
</style></head><body>
<h1>drill {{.R.Drill}}: <span class="{{if .R.Invalid}}invalid{{else if .R.Passed}}pass{{else}}fail{{end}}">{{.R.Verdict}}</span></h1>
<p>{{.R.Title}} — seed {{.R.Seed}}, started {{.R.Started}}.{{if .R.Invalid}} <b>Not judged:</b> {{.R.Invalid}}{{end}}</p>
<p class="legend"><span><i class="sw" style="background:#f79009;opacity:.55"></i>a fault in force on its target</span><span><i class="sw" style="background:#98a2b3"></i>a grant</span><span><i class="sw" style="background:#f79009"></i>a double grant (a holder outlived its lock)</span><span><i class="sw" style="background:#d92d20"></i>a lock violation (both holders inside their validity)</span><span><i class="sw" style="background:#1d4ed8"></i>a stale write fenced</span><span><i class="sw" style="background:#12b76a"></i>availability per second (the share of requests the service answered)</span></p>
<svg width="{{printf "%.0f" .Width}}" height="{{printf "%.0f" .Height}}" viewBox="0 0 {{printf "%.0f" .Width}} {{printf "%.0f" .Height}}" role="img" aria-label="drill timeline">
{{range .Shades}}<rect x="{{printf "%.1f" .X}}" y="0" width="{{printf "%.1f" .W}}" height="{{printf "%.0f" $.AxisY}}" fill="#f79009" fill-opacity="0.08"/>{{end}}
{{range $l := .Faults}}<text x="4" y="{{printf "%.1f" .Y}}" dy="12">{{.Name}}</text>
{{range .Bands}}<g><title>{{.Title}}</title><rect x="{{printf "%.1f" .X}}" y="{{printf "%.1f" $l.Y}}" width="{{printf "%.1f" .W}}" height="15" fill="#f79009" fill-opacity="0.55" rx="2"/><text x="{{printf "%.1f" .X}}" y="{{printf "%.1f" $l.Y}}" dx="3" dy="12" style="font-size:11px">{{.Label}}</text></g>{{end}}
{{end}}
{{range $g := .Guards}}<a href="{{.Link}}"><text x="4" y="{{printf "%.1f" .Y}}" dy="16">{{.Name}}</text></a>
<text x="4" y="{{printf "%.1f" .Y}}" dy="31" style="font-size:11px">{{.Lost}}, {{.Summary}}</text>
<text x="4" y="{{printf "%.1f" .Y}}" dy="45" style="font-size:11px">{{.NGrants}} grants · {{.NDoubles}} double · {{.NViolations}} violations · {{.NFenc}} fenced</text>
<rect x="{{printf "%.0f" $.Left}}" y="{{printf "%.1f" .Y}}" width="{{printf "%.0f" $.Plot}}" height="58" fill="none" stroke="#d0d5dd"/>
{{if .Avail}}<polyline points="{{.Avail}}" fill="none" stroke="#12b76a" stroke-width="1.5"/>{{end}}
{{range .Grants}}<line x1="{{printf "%.1f" .X}}" x2="{{printf "%.1f" .X}}" y1="{{printf "%.1f" $g.TickTop}}" y2="{{printf "%.1f" $g.TickBottom}}" stroke="#98a2b3" stroke-opacity="0.6"/>{{end}}
{{range .Doubles}}<g><title>{{.Title}}</title><circle cx="{{printf "%.1f" .X}}" cy="{{printf "%.1f" $g.MarkY}}" r="4" fill="#f79009"/></g>{{end}}
{{range .Violations}}<g><title>{{.Title}}</title><circle cx="{{printf "%.1f" .X}}" cy="{{printf "%.1f" $g.MarkY}}" r="5" fill="#d92d20"/></g>{{end}}
{{range .Fenced}}<g><title>{{.Title}}</title><rect x="{{printf "%.1f" .X}}" y="{{printf "%.1f" $g.FenceY}}" width="5" height="5" fill="#1d4ed8"/></g>{{end}}
{{end}}
<line x1="{{printf "%.0f" .Left}}" x2="{{printf "%.0f" .Right}}" y1="{{printf "%.1f" .AxisY}}" y2="{{printf "%.1f" .AxisY}}" stroke="#98a2b3"/>
{{range .Ticks}}<line x1="{{printf "%.1f" .X}}" x2="{{printf "%.1f" .X}}" y1="{{printf "%.1f" $.AxisY}}" y2="{{printf "%.1f" $.TickEnd}}" stroke="#98a2b3"/><text x="{{printf "%.1f" .X}}" y="{{printf "%.1f" $.AxisY}}" dy="18" text-anchor="middle">{{.Label}}</text>{{end}}
</svg>
<p>Each guard's name links its load report (report.html). Marks carry their time and key on hover.</p>
</body></html>
`))

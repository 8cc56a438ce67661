package plan

import (
	"bytes"
	"fmt"
	"html/template"
	"math"
	"os"
	"sort"
	"strings"
)

// plan.html: the measured curves the recommendation stands on (the knee,
// the data disks' fsyncs, the round trips, the hold-time tail), each with
// the chosen value marked, drawn as inline SVG: the page needs no script
// and no network.

// series is one line of a chart.
type series struct {
	name   string
	color  string
	points []Point
	// dots marks each point, green when pass[i], red otherwise (nil: no
	// dots).
	pass []bool
}

// mark is a horizontal (y) or vertical (x) line with its label.
type mark struct {
	at    float64
	label string
	color string
	dash  bool
}

// chart is one SVG chart.
type chart struct {
	title, xLabel, yLabel string
	// percentileX spreads the x axis as percentiles (0 to 99.99, the
	// tail stretched); logY makes the y axis logarithmic.
	percentileX, logY bool
	lines             []series
	hmarks, vmarks    []mark
}

const (
	chartW, chartH = 640, 300
	padL, padR     = 64, 150
	padT, padB     = 28, 44
)

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// xOf maps a data x to the axis' scale.
func (c chart) xOf(x float64) float64 {
	if c.percentileX {
		return -math.Log10(1 - min(x, 99.99)/100)
	}
	return x
}

func (c chart) yOf(y float64) float64 {
	if c.logY {
		return math.Log10(max(y, 1e-3))
	}
	return y
}

// svg renders the chart.
func (c chart) svg() template.HTML {
	var xs, ys []float64
	for _, s := range c.lines {
		for _, p := range s.points {
			xs, ys = append(xs, c.xOf(p.X)), append(ys, c.yOf(p.Y))
		}
	}
	for _, m := range c.hmarks {
		ys = append(ys, c.yOf(m.at))
	}
	for _, m := range c.vmarks {
		xs = append(xs, c.xOf(m.at))
	}
	if len(xs) == 0 || len(ys) == 0 {
		return template.HTML(fmt.Sprintf(`<p class="none">%s: nothing measured.</p>`, template.HTMLEscapeString(c.title)))
	}
	x0, x1 := minMax(xs)
	y0, y1 := minMax(ys)
	if !c.logY {
		y0 = min(y0, 0)
	}
	if c.percentileX {
		x0 = 0
	}
	if x1 == x0 {
		x1 = x0 + 1
	}
	if y1 == y0 {
		y1 = y0 + 1
	}
	y1 += (y1 - y0) * 0.08
	pw, ph := float64(chartW-padL-padR), float64(chartH-padT-padB)
	px := func(x float64) float64 { return padL + (c.xOf(x)-x0)/(x1-x0)*pw }
	py := func(y float64) float64 { return padT + ph - (c.yOf(y)-y0)/(y1-y0)*ph }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`, chartW, chartH, chartW, chartH, template.HTMLEscapeString(c.title))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="#fff" stroke="#ccc"/>`, padL, padT, pw, ph)
	// Axes' ticks.
	for _, t := range c.xTicks(x0, x1) {
		x := padL + (c.xOf(t)-x0)/(x1-x0)*pw
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" class="tick" text-anchor="middle">%s</text>`,
			x, padT, x, padT+ph, x, padT+ph+14, tickText(t, c.percentileX))
	}
	for _, t := range c.yTicks(y0, y1) {
		y := padT + ph - (c.yOf(t)-y0)/(y1-y0)*ph
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" class="tick" text-anchor="end">%s</text>`,
			padL, y, padL+pw, y, padL-4, y+4, tickText(t, false))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="axis" text-anchor="middle">%s</text>`, padL+pw/2, chartH-6, template.HTMLEscapeString(c.xLabel))
	fmt.Fprintf(&b, `<text x="14" y="%.1f" class="axis" text-anchor="middle" transform="rotate(-90 14 %.1f)">%s</text>`, padT+ph/2, padT+ph/2, template.HTMLEscapeString(c.yLabel))
	// The marks, then the lines over them.
	labels := labelRows(c.hmarks, py)
	for i, m := range c.hmarks {
		y := py(m.at)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"%s/><text x="%.1f" y="%.1f" class="mark" fill="%s">%s</text>`,
			padL, y, padL+pw, y, m.color, dashAttr(m.dash), padL+pw+4, labels[i]+4, m.color, template.HTMLEscapeString(m.label))
	}
	for i, m := range c.vmarks {
		x := px(m.at)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"%s/><text x="%.1f" y="%d" class="mark" fill="%s" text-anchor="middle">%s</text>`,
			x, padT, x, padT+ph, m.color, dashAttr(m.dash), x, padT-6-10*(i%2), m.color, template.HTMLEscapeString(m.label))
	}
	for i, s := range c.lines {
		color := s.color
		if color == "" {
			color = palette[i%len(palette)]
		}
		var pts []string
		for _, p := range s.points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.X), py(p.Y)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, color, strings.Join(pts, " "))
		for j, p := range s.points {
			if s.pass == nil {
				continue
			}
			fill := "#2ca02c"
			if !s.pass[j] {
				fill = "#d62728"
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"><title>%s: %s</title></circle>`, px(p.X), py(p.Y), fill, tickText(p.X, false), tickText(p.Y, false))
		}
		// The legend, right of the plot.
		ly := padT + ph - 14*float64(len(c.lines)-i)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/><text x="%.1f" y="%.1f" class="legend">%s</text>`,
			padL+pw+4, ly, padL+pw+20, ly, color, padL+pw+24, ly+4, template.HTMLEscapeString(s.name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// labelRows places the labels of horizontal marks at their lines, moved
// apart where two would overlap.
func labelRows(ms []mark, py func(float64) float64) []float64 {
	const gap = 12
	idx := make([]int, len(ms))
	ys := make([]float64, len(ms))
	for i, m := range ms {
		idx[i], ys[i] = i, py(m.at)
	}
	sort.Slice(idx, func(a, b int) bool { return ys[idx[a]] < ys[idx[b]] })
	for k := 1; k < len(idx); k++ {
		if prev, cur := ys[idx[k-1]], ys[idx[k]]; cur-prev < gap {
			ys[idx[k]] = prev + gap
		}
	}
	return ys
}

func dashAttr(d bool) string {
	if d {
		return ` stroke-dasharray="5 4"`
	}
	return ""
}

func minMax(v []float64) (float64, float64) {
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// xTicks are the x axis' ticks in data units.
func (c chart) xTicks(x0, x1 float64) []float64 {
	if c.percentileX {
		var out []float64
		for _, p := range []float64{0, 90, 99, 99.9, 99.99} {
			if c.xOf(p) <= x1+1e-9 {
				out = append(out, p)
			}
		}
		return out
	}
	return niceTicks(x0, x1)
}

func (c chart) yTicks(y0, y1 float64) []float64 {
	if !c.logY {
		return niceTicks(y0, y1)
	}
	var out []float64
	for e := math.Floor(y0); e <= y1; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if l := math.Log10(v); l >= y0 && l <= y1 {
				out = append(out, v)
			}
		}
	}
	return out
}

// niceTicks are about five round ticks from lo to hi.
func niceTicks(lo, hi float64) []float64 {
	span := hi - lo
	step := math.Pow(10, math.Floor(math.Log10(span/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if span/(step*m) <= 6 {
			step *= m
			break
		}
	}
	var out []float64
	for t := math.Ceil(lo/step) * step; t <= hi+step*1e-9; t += step {
		out = append(out, math.Round(t/step)*step)
	}
	return out
}

func tickText(v float64, percentile bool) string {
	s := trimFloat(v)
	if math.Abs(v) < 1 && v != 0 {
		s = strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
	}
	if percentile {
		return "p" + s
	}
	return s
}

// charts are the plan's four charts.
func (p *Plan) charts() []chart {
	r := p.Rec
	m := p.Measured
	var out []chart

	// The knee: acquire p99 by offered rate, the SLO, the target, the knee.
	knee := chart{title: "Knee: acquire p99 by offered rate", xLabel: "offered rate (reservations/s)", yLabel: "acquire p99 (ms)", logY: true}
	var kp []Point
	var pass []bool
	for _, s := range m.Sweep.Steps {
		kp = append(kp, Point{X: s.Rate, Y: s.AcquireP99Ms})
		pass = append(pass, s.Pass)
	}
	sorted := sortedByX(kp, pass)
	knee.lines = []series{{name: "acquire p99", points: sorted.points, pass: sorted.pass}}
	if d := p.Facts.SLOAcquireP99; d > 0 {
		knee.hmarks = append(knee.hmarks, mark{at: msOf(d), label: "SLO " + dur(d), color: "#d62728", dash: true})
	}
	knee.vmarks = append(knee.vmarks, mark{at: p.Target.Rate, label: "target " + rate(p.Target.Rate) + "/s", color: "#000"})
	if m.Sweep.Knee > 0 {
		knee.vmarks = append(knee.vmarks, mark{at: m.Sweep.Knee, label: fmt.Sprintf("knee %s/s (%.2f×)", rate(m.Sweep.Knee), r.KneeHeadroom), color: "#2ca02c", dash: true})
	}
	out = append(out, knee)

	// The disks: one append's latency, etcd's bound.
	disk := chart{title: "Data disks: one 64-byte append with O_DSYNC; appendfsync " + r.Persistence, xLabel: "percentile", yLabel: "latency (ms)", percentileX: true, logY: true}
	if p.Facts.DiskMeasured {
		disk.title += fmt.Sprintf(" (the target needs %.0f fsyncs/s of the %.0f/s measured)", p.Facts.neededFsyncs(), p.Facts.DiskSyncsPerS)
	}
	for _, d := range m.Disks {
		if d.Error == "" {
			disk.lines = append(disk.lines, series{name: fmt.Sprintf("%s %.0f/s", d.Host, d.SyncsPerS), points: d.Latency.Curve})
		}
	}
	disk.hmarks = append(disk.hmarks, mark{at: msOf(etcdFsyncP99), label: "etcd's p99 bound 10ms", color: "#d62728", dash: true})
	out = append(out, disk)

	// The round trips: each node's, the planned node timeout.
	rtt := chart{title: "Round trips (PING) by node", xLabel: "percentile", yLabel: "round trip (ms)", percentileX: true, logY: true}
	for _, n := range m.Nodes {
		rtt.lines = append(rtt.lines, series{name: fmt.Sprintf("node%d", n.Node), points: n.RTT.Curve})
	}
	rtt.hmarks = append(rtt.hmarks, mark{at: msOf(r.NodeTimeout), label: "node timeout " + dur(r.NodeTimeout), color: "#000"})
	if p.Facts.RTTP99 > 0 {
		rtt.hmarks = append(rtt.hmarks, mark{at: msOf(timeoutRTTs * p.Facts.RTTP99), label: "10 × p99", color: "#7f7f7f", dash: true})
	}
	out = append(out, rtt)

	// The hold-time tail: the holds, the validity and the TTL.
	hold := chart{title: "Hold-time tail against the planned TTL", xLabel: "percentile", yLabel: "hold (s)", percentileX: true}
	var hp []Point
	for _, pt := range p.Target.Hold.Dist.Curve {
		hp = append(hp, Point{X: pt.X, Y: pt.Y / 1e3})
	}
	hold.lines = []series{{name: "hold", points: hp}}
	acq := p.Facts.AcquireP99
	if acq == 0 {
		acq = p.Facts.SLOAcquireP99
	}
	hold.hmarks = append(hold.hmarks,
		mark{at: r.TTL.Seconds(), label: "TTL " + dur(r.TTL), color: "#000"},
		mark{at: validityOf(r.TTL, acq, r.DriftFactor, r.DriftFixed).Seconds(), label: "validity", color: "#2ca02c", dash: true},
		mark{at: p.Target.Hold.Max.Seconds(), label: "tail " + dur(p.Target.Hold.Max), color: "#d62728", dash: true})
	out = append(out, hold)
	return out
}

type sortedPoints struct {
	points []Point
	pass   []bool
}

func sortedByX(pts []Point, pass []bool) sortedPoints {
	idx := make([]int, len(pts))
	for i := range idx {
		idx[i] = i
	}
	for i := 1; i < len(idx); i++ {
		for j := i; j > 0 && pts[idx[j]].X < pts[idx[j-1]].X; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	var out sortedPoints
	for _, i := range idx {
		out.points = append(out.points, pts[i])
		out.pass = append(out.pass, pass[i])
	}
	return out
}

var pageTmpl = template.Must(template.New("plan").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1360px; color: #222; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
.verdict { padding: 10px 14px; border-radius: 6px; margin: 12px 0; }
.ok { background: #e6f4ea; border: 1px solid #2ca02c; } .bad { background: #fdecea; border: 1px solid #d62728; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(640px, 1fr)); gap: 16px; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 10px; }
.card h3 { font-size: 14px; margin: 2px 0 6px; }
table { border-collapse: collapse; margin: 8px 0; } td, th { border: 1px solid #ddd; padding: 4px 8px; vertical-align: top; text-align: left; }
th { background: #f6f6f6; } td.v { font-weight: 600; white-space: nowrap; }
.tick { font-size: 11px; fill: #555; } .axis { font-size: 12px; fill: #333; } .mark, .legend { font-size: 11px; }
.warn { color: #8a5a00; } .critical { color: #b00020; font-weight: 600; }
pre { background: #f6f6f6; padding: 10px; overflow-x: auto; }
</style></head><body>
<h1>{{.Title}}</h1>
<div class="sub">{{.Sub}}</div>
<div class="verdict {{if .Meets}}ok{{else}}bad{{end}}"><b>{{if .Meets}}Meets the target.{{else}}Does not meet the target.{{end}}</b> {{.Verdict}}</div>
<h2>What the recommendation stands on</h2>
<div class="grid">{{range .Charts}}<div class="card"><h3>{{.Title}}</h3>{{.SVG}}</div>{{end}}</div>
<h2>Recommendation</h2>
<table><tr><th>value</th><th>recommended</th><th>rule</th><th>measured</th></tr>
{{range .Values}}<tr><td>{{.Label}}</td><td class="v">{{.Value}}{{if .Fixed}} (fixed){{end}}</td><td>{{.Rule}}</td><td>{{.Measured}}</td></tr>{{end}}
</table>
<h2>Warnings</h2>
{{if .Warnings}}<ul>{{range .Warnings}}<li class="{{if eq .Severity "critical"}}critical{{else}}warn{{end}}">{{.Severity}} ({{.From}}): {{.Message}} {{.Fix}}</li>{{end}}</ul>{{else}}<p>None.</p>{{end}}
{{if .Verify}}<h2>Verification</h2>
<table><tr><th>drill</th><th>must</th><th>verdict</th><th>double grants</th><th>lock violations</th></tr>
{{range .Verify.Drills}}<tr><td>{{.Name}}{{if .Control}} (wrong: {{.Wrong}}){{end}}</td><td>{{if .Control}}fail{{else}}pass{{end}}</td><td>{{.Verdict}}</td><td>{{.DoubleGrants}}</td><td>{{.LockViolations}}</td></tr>{{end}}
</table>{{end}}
<h2>The library's options</h2>
<pre>{{.Options}}</pre>
<p>plan.md has the rules' sources and every measurement; plan.json has the same for scripts.</p>
</body></html>
`))

type pageChart struct {
	Title string
	SVG   template.HTML
}

type pageVerdict struct {
	DrillVerdict
	Verdict string
}

// writeHTML writes plan.html.
func (p *Plan) writeHTML(path string) error {
	data := struct {
		Title, Sub, Verdict string
		Meets               bool
		Charts              []pageChart
		Values              []Value
		Warnings            []Warning
		Verify              *struct{ Drills []pageVerdict }
		Options             string
	}{
		Title: fmt.Sprintf("Redlock plan: %s reservations/s, %s", rate(p.Target.Rate), strings.Join(p.Target.SLO, " && ")),
		Sub:   fmt.Sprintf("%s, %d nodes, %s", siteWords(p.Site), len(p.Nodes), p.Created.Format("2006-01-02 15:04 MST")),
		Meets: p.Rec.Meets, Verdict: p.Verdict(), Values: p.Rec.Values, Warnings: p.Rec.Warnings, Options: p.Options,
	}
	for _, c := range p.charts() {
		data.Charts = append(data.Charts, pageChart{Title: c.title, SVG: c.svg()})
	}
	if p.Verify != nil {
		data.Verify = &struct{ Drills []pageVerdict }{}
		for _, d := range p.Verify.Drills {
			data.Verify.Drills = append(data.Verify.Drills, pageVerdict{d, d.verdict()})
		}
	}
	var b bytes.Buffer
	if err := pageTmpl.Execute(&b, data); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	return nil
}

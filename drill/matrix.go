package drill

import (
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/inventory"
)

// Matrix files, written into the output directory of a matrix run.
const (
	MatrixMarkdown = "matrix.md"
	MatrixJSON     = "matrix.json"
	MatrixHTML     = "matrix.html"
)

// Matrix is drills × guards: each drill's result, in the order they ran.
type Matrix struct {
	Generated string `json:"generated"`
	// Guards is the union of the guards the drills run and those their
	// faults can reach, in a fixed order.
	Guards []string     `json:"guards"`
	Drills []MatrixItem `json:"drills"`
	// Coverage counts the cells the drills' faults can reach and those of
	// them the drills ran.
	Coverage Coverage `json:"coverage"`
	// TookS is how long the whole matrix took, lab set-up included.
	TookS float64 `json:"took_s"`
}

// Coverage is how much of the applicable matrix ran: Run of Applicable
// cells (a drill × a guard its faults can reach, or that it runs as a
// control beside them: spec.Reach).
type Coverage struct {
	Run        int `json:"run"`
	Applicable int `json:"applicable"`
}

// String is "190 of 190 applicable cells run (100%)".
func (c Coverage) String() string {
	share := 1.0
	if c.Applicable > 0 {
		share = float64(c.Run) / float64(c.Applicable)
	}
	return fmt.Sprintf("%d of %d applicable cells run (%s)", c.Run, c.Applicable, pct(share))
}

// Mark is what a cell of the matrix holds.
type Mark string

// The marks.
const (
	// MarkRun: the drill ran the guard; the cell shows what it lost.
	MarkRun Mark = "run"
	// MarkNotRun: the drill's faults reach the guard, or it would be a
	// control beside them, but the drill did not run it.
	MarkNotRun Mark = "not run"
	// MarkNotApplicable: the drill's faults cannot reach the guard.
	MarkNotApplicable Mark = "not applicable"
)

// MatrixCell is one guard's place in one drill.
type MatrixCell struct {
	Mark Mark `json:"mark"`
	// Reach says how the drill bears on the guard (spec.Reach): reached by
	// what, a control beside what, or not applicable.
	Reach      string `json:"reach"`
	Applicable bool   `json:"applicable"`
}

// markLegend explains the marks of empty cells, under the matrix.
const markLegend = "n/a: not applicable, the drill's faults cannot reach this guard. " +
	"not run: the drill's faults reach this guard, or it would run as a control beside them, but the drill does not run it."

// MatrixItem is one drill of a matrix.
type MatrixItem struct {
	Drill  string `json:"drill"`
	Title  string `json:"title,omitempty"`
	File   string `json:"file"`
	Passed bool   `json:"passed"`
	// Invalid says why the drill could not be judged (Result.Invalid): it
	// is counted apart, neither as expected nor not.
	Invalid string  `json:"invalid,omitempty"`
	Result  *Result `json:"result,omitempty"`
	// Error is set when the drill could not run.
	Error string  `json:"error,omitempty"`
	TookS float64 `json:"took_s"`
	// Cells are the drill's cells, by guard, for every guard of the
	// matrix.
	Cells map[string]MatrixCell `json:"cells"`
}

// NewMatrix starts a matrix over the specs' guards: those they run and
// those their faults can reach.
func NewMatrix(specs []*Spec) *Matrix {
	seen := map[inventory.Guard]bool{}
	for _, s := range specs {
		for _, g := range s.Workload.Guards {
			seen[g] = true
		}
		for _, g := range guardOrder() {
			if s.Reach(g).Applicable() {
				seen[g] = true
			}
		}
	}
	m := &Matrix{Generated: time.Now().UTC().Format(time.RFC3339)}
	for _, g := range guardOrder() {
		if seen[g] {
			m.Guards = append(m.Guards, string(g))
			delete(seen, g)
		}
	}
	var rest []string
	for g := range seen {
		rest = append(rest, string(g))
	}
	sort.Strings(rest)
	m.Guards = append(m.Guards, rest...)
	return m
}

// guardOrder is the matrix's column order: from no protection to the
// database deciding, each mistake next to the practice it breaks.
func guardOrder() []inventory.Guard {
	return []inventory.Guard{
		inventory.GuardNone, inventory.GuardRedisSingle, inventory.GuardRedlockDel, inventory.GuardRedlock,
		inventory.GuardRedsync, inventory.GuardNodeRedlockDel, inventory.GuardNodeRedlock,
		inventory.GuardRedlockFenced, inventory.GuardEtcd, inventory.GuardEtcdFenced,
		inventory.GuardDBVersion, inventory.GuardDBForUpdate,
		inventory.GuardDBAtomic,
	}
}

// Add records a drill's outcome.
func (m *Matrix) Add(s *Spec, r *Result, err error, took time.Duration) {
	it := MatrixItem{Drill: s.Name, Title: s.Title, File: s.File, Result: r, TookS: took.Seconds(), Cells: map[string]MatrixCell{}}
	switch {
	case err != nil:
		it.Error = err.Error()
	case r.Invalid != "":
		it.Invalid = r.Invalid
	default:
		it.Passed = r.Passed
	}
	for _, g := range m.Guards {
		reach := s.Reach(inventory.Guard(g))
		c := MatrixCell{Reach: reach.String(), Applicable: reach.Applicable(), Mark: MarkNotApplicable}
		switch {
		case r != nil && r.Guards[g] != nil:
			c.Mark = MarkRun
		case c.Applicable:
			c.Mark = MarkNotRun
		}
		if c.Applicable {
			m.Coverage.Applicable++
			if c.Mark == MarkRun {
				m.Coverage.Run++
			}
		}
		it.Cells[g] = c
	}
	m.Drills = append(m.Drills, it)
}

// Passed reports whether every drill ran and held.
func (m *Matrix) Passed() bool {
	for _, d := range m.Drills {
		if !d.Passed {
			return false
		}
	}
	return len(m.Drills) > 0
}

// Write writes matrix.md, matrix.json and matrix.html into dir.
func (m *Matrix) Write(dir string) error {
	if err := writeJSON(filepath.Join(dir, MatrixJSON), m); err != nil {
		return err
	}
	var md strings.Builder
	m.WriteMarkdown(&md)
	if err := os.WriteFile(filepath.Join(dir, MatrixMarkdown), []byte(md.String()), 0o644); err != nil {
		return fmt.Errorf("drill: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, MatrixHTML))
	if err != nil {
		return fmt.Errorf("drill: %w", err)
	}
	if err := matrixTmpl.Execute(f, m.htmlData()); err != nil {
		f.Close()
		return fmt.Errorf("drill: matrix.html: %w", err)
	}
	return f.Close()
}

// Cell is one guard's outcome in one drill, in the words of the matrix.
type Cell struct {
	// Lock: did the lock itself fail (two holders inside their validity)?
	LockFailed     bool
	LockViolations int64
	// Outlived: did a holder outlive its lock (double grants that are not
	// lock violations)?
	Outlived     bool
	DoubleGrants int64
	// DataLost: lost updates or oversell in the protected store.
	DataLost         bool
	LostUpdates      int64
	Oversell         int64
	FencedRejections int64
	Availability     float64
	AcquireP99Ms     float64
	HasLock          bool
	Held             bool
	Failures         []string
}

func cellOf(g *GuardResult, guard string) Cell {
	c := g.Counts
	hasLock := inventory.Guard(guard).Locks()
	cell := Cell{
		LockViolations: c.LockViolations, DoubleGrants: c.DoubleGrants,
		LockFailed: c.LockViolations > 0, Outlived: c.DoubleGrants > c.LockViolations,
		LostUpdates: c.LostUpdates, Oversell: c.Oversell, DataLost: c.LostUpdates > 0 || c.Oversell > 0,
		FencedRejections: c.FencedRejections, Availability: g.Availability, AcquireP99Ms: g.AcquireP99Ms,
		HasLock: hasLock, Held: g.Passed,
	}
	for _, e := range g.Expectations {
		if !e.Held {
			cell.Failures = append(cell.Failures, fmt.Sprintf("%s (observed %s)", e.Expr, e.Observed))
		}
	}
	return cell
}

// Words renders a cell as the matrix's text: lock, holder, data, then the
// cost.
func (c Cell) Words() []string {
	var out []string
	if c.HasLock {
		if c.LockFailed {
			out = append(out, fmt.Sprintf("lock FAILED (%d)", c.LockViolations))
		} else {
			out = append(out, "lock held")
		}
		if c.Outlived {
			out = append(out, fmt.Sprintf("holder outlived it (%d)", c.DoubleGrants-c.LockViolations))
		}
	} else {
		out = append(out, "no lock")
	}
	switch {
	case c.DataLost && c.Oversell > 0:
		out = append(out, fmt.Sprintf("data LOST (%d units, %d oversold)", c.LostUpdates, c.Oversell))
	case c.DataLost:
		unit := "units"
		if c.LostUpdates == 1 {
			unit = "unit"
		}
		out = append(out, fmt.Sprintf("data LOST (%d %s)", c.LostUpdates, unit))
	default:
		out = append(out, "data kept")
	}
	if c.FencedRejections > 0 {
		out = append(out, fmt.Sprintf("%d stale writes fenced", c.FencedRejections))
	}
	cost := fmt.Sprintf("avail %s", pct(c.Availability))
	if c.HasLock {
		cost += fmt.Sprintf(" · p99 %s", msText(c.AcquireP99Ms))
	}
	out = append(out, cost)
	if c.Held {
		out = append(out, "as expected")
	} else {
		out = append(out, "NOT as expected")
	}
	return out
}

func pct(f float64) string {
	s := fmt.Sprintf("%.2f", f*100)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + "%"
}

func msText(ms float64) string {
	switch {
	case ms >= 1000:
		return fmt.Sprintf("%.2f s", ms/1000)
	case ms >= 10:
		return fmt.Sprintf("%.0f ms", ms)
	}
	return fmt.Sprintf("%.1f ms", ms)
}

// WriteMarkdown writes the matrix as a Markdown table: a row per drill, a
// column per guard.
func (m *Matrix) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "| drill |")
	for _, g := range m.Guards {
		fmt.Fprintf(w, " `%s` |", g)
	}
	fmt.Fprintf(w, "\n|---|")
	for range m.Guards {
		fmt.Fprintf(w, "---|")
	}
	fmt.Fprintln(w)
	for _, d := range m.Drills {
		fmt.Fprintf(w, "| [%s](drills/%s.md) |", d.Drill, d.Drill)
		for _, g := range m.Guards {
			switch c := d.Cells[g]; {
			case c.Mark == MarkNotApplicable:
				fmt.Fprintf(w, " n/a |")
			case d.Error != "":
				fmt.Fprintf(w, " did not run |")
			case c.Mark == MarkNotRun:
				fmt.Fprintf(w, " not run |")
			default:
				fmt.Fprintf(w, " %s |", strings.Join(cellOf(d.Result.Guards[g], g).Words(), "<br>"))
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\n%s\n\nCoverage: %s.\n", markLegend, m.Coverage)
	passed, invalid := 0, 0
	for _, d := range m.Drills {
		switch {
		case d.Invalid != "":
			invalid++
		case d.Passed:
			passed++
		}
	}
	judged := ""
	if invalid > 0 {
		judged = fmt.Sprintf(" (%d INVALID: the host could not keep their schedule, so they were not judged)", invalid)
	}
	fmt.Fprintf(w, "\n%d of %d drills as expected%s; the matrix took %s (generated %s).\n", passed, len(m.Drills), judged, (time.Duration(m.TookS * float64(time.Second))).Round(time.Second), m.Generated)
	for _, d := range m.Drills {
		if d.Error != "" {
			fmt.Fprintf(w, "\n- %s did not run: %s\n", d.Drill, d.Error)
		}
		if d.Invalid != "" {
			fmt.Fprintf(w, "\n- %s INVALID: %s\n", d.Drill, d.Invalid)
			continue
		}
		if d.Result != nil {
			for _, f := range d.Result.Failures() {
				fmt.Fprintf(w, "\n- %s: %s\n", d.Drill, f)
			}
		}
	}
}

type htmlCell struct {
	// Empty is the mark of a cell without a result: n/a, not run or did
	// not run.
	Empty string
	Title string
	Class string
	Lines []string
	Fails []string
}

type htmlRow struct {
	Drill, Title, Error, Invalid string
	Passed                       bool
	Cells                        []htmlCell
}

func (m *Matrix) htmlData() map[string]any {
	var rows []htmlRow
	for _, d := range m.Drills {
		r := htmlRow{Drill: d.Drill, Title: d.Title, Error: d.Error, Invalid: d.Invalid, Passed: d.Passed}
		for _, g := range m.Guards {
			switch mc := d.Cells[g]; {
			case mc.Mark == MarkNotApplicable:
				r.Cells = append(r.Cells, htmlCell{Empty: "n/a", Class: "na", Title: mc.Reach})
				continue
			case d.Error != "":
				r.Cells = append(r.Cells, htmlCell{Empty: "did not run", Class: "notrun", Title: mc.Reach})
				continue
			case mc.Mark == MarkNotRun:
				r.Cells = append(r.Cells, htmlCell{Empty: "not run", Class: "notrun", Title: mc.Reach})
				continue
			}
			c := cellOf(d.Result.Guards[g], g)
			class := "ok"
			switch {
			case !c.Held:
				class = "unexpected"
			case c.LockFailed || c.DataLost:
				class = "broken"
			case c.Outlived:
				class = "outlived"
			}
			r.Cells = append(r.Cells, htmlCell{Class: class, Lines: c.Words(), Fails: c.Failures, Title: d.Cells[g].Reach})
		}
		rows = append(rows, r)
	}
	return map[string]any{"M": m, "Rows": rows, "Legend": markLegend}
}

var matrixTmpl = template.Must(template.New("matrix").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>redlock-lab drill matrix</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:.4em .6em;vertical-align:top}
th{background:#f4f4f4;text-align:left}td.ok{background:#eef8ee}td.outlived{background:#fff6dd}
td.broken{background:#fde8e8}td.unexpected{outline:3px solid #c00}td.na{color:#999;text-align:center}
td.notrun{background:#f0f0f0;color:#c00;text-align:center;font-weight:bold}
.title{color:#555;font-size:12px}.fail{color:#c00;font-size:12px}
</style></head><body>
<h1>Drill matrix</h1>
<p>Each cell: did the lock itself fail (two holders inside their validity), did a holder outlive its lock, was data lost; then availability and acquire p99. Green: lock held and data kept; yellow: a holder outlived its lock; red: the lock failed or data was lost; a red outline: not what the drill expected. Generated {{.M.Generated}}.</p>
<table><tr><th>drill</th>{{range .M.Guards}}<th><code>{{.}}</code></th>{{end}}</tr>
{{range .Rows}}<tr><td><b>{{.Drill}}</b>{{if not .Error}} · <a href="{{.Drill}}/timeline.html">timeline</a>{{end}}<div class="title">{{.Title}}</div>{{if .Error}}<div class="fail">did not run: {{.Error}}</div>{{end}}{{if .Invalid}}<div class="fail">INVALID, not judged: {{.Invalid}}</div>{{end}}</td>
{{range .Cells}}{{if .Empty}}<td class="{{.Class}}" title="{{.Title}}">{{.Empty}}</td>{{else}}<td class="{{.Class}}" title="{{.Title}}">{{range .Lines}}{{.}}<br>{{end}}{{range .Fails}}<div class="fail">{{.}}</div>{{end}}</td>{{end}}{{end}}</tr>
{{end}}</table>
<p>{{.Legend}}</p>
<p>Coverage: {{.M.Coverage}}.</p></body></html>
`))

package loadgen

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"strings"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
)

//go:embed report.html.tmpl
var reportTmplText string

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct": func(share float64) float64 { return share * 100 },
}).Parse(reportTmplText))

// htmlData is what report.html.tmpl renders: the tables server-side, the
// charts in the page's own script from the JSON payload. The page fetches
// nothing.
type htmlData struct {
	Title, Subtitle  string
	Generated        string
	Summary          Summary
	Rows             []htmlRow
	OutcomeNames     []string
	NodeOutcomeNames []string
	// Drill names the drill the run was a guard's load in, with its
	// verdict; nil for a run of its own.
	Drill *DrillInfo
	// Late is the Late card: operations never sent, and their share of
	// the requests; LateBad when the share is over DefaultMaxLateRatio.
	Late      int64
	LateShare float64
	LateBad   bool
	LateLimit float64
	// Words defines every outcome and column the page shows.
	Words         []htmlWord
	NodeWords     []htmlWord
	SafetyChecked bool
	// SafetyCard is the Safety card's text: every count the run checked,
	// by the name the drill matrix gives it; SafetyBad when one is not 0.
	SafetyCard       string
	SafetyBad        bool
	ThresholdsFailed int
	Faults           []faultSpan
	Sweep            *sweepView
	JSON             template.JS
}

type htmlRow struct {
	Name string
	P    Percentiles
}

// htmlWord is one defined word of the page.
type htmlWord struct{ Word, Meaning string }

// faultSpan is a fault phase in seconds from the run start. Own marks a
// fault on what this run's guard uses (its lock service, or its own
// process); the others (a Redis node's fault on an etcd guard's page) are
// drawn apart.
type faultSpan struct {
	Name string  `json:"name"`
	From float64 `json:"from"`
	To   float64 `json:"to"`
	Open bool    `json:"open"`
	Own  bool    `json:"own"`
}

// htmlPayload is the chart data, embedded in the page as JSON.
type htmlPayload struct {
	Meta     Meta                   `json:"meta"`
	Summary  Summary                `json:"summary"`
	Series   *Series                `json:"series,omitempty"`
	Spectrum map[string][]specPoint `json:"spectrum,omitempty"`
	Faults   []faultSpan            `json:"faults"`
	Sweep    *sweepView             `json:"sweep,omitempty"`
}

// safetyCard names the counts a run checked, as the drill matrix and
// result.json do: double grants and lock violations (when holds were
// checked), lost updates (when the store was audited), and oversell when
// there was any. It is "safe" when every one is 0.
func safetyCard(sf Safety) (text string, bad bool) {
	var parts []string
	add := func(n int64, name string) {
		parts = append(parts, fmt.Sprintf("%d %s", n, name))
		bad = bad || n != 0
	}
	if sf.DoubleGrantsChecked {
		add(sf.DoubleGrants, "double grants")
		add(sf.LockViolations, "lock violations")
	}
	if sf.AuditChecked {
		add(sf.LostUpdates, "lost updates")
	}
	if sf.Oversell != 0 {
		add(sf.Oversell, "oversold SKUs")
	}
	if !bad {
		return "safe", false
	}
	return strings.Join(parts, " · "), true
}

func (r *Report) htmlData() *htmlData {
	s := r.Summary
	d := &htmlData{
		Title:            r.title(),
		Subtitle:         r.subtitle(),
		Generated:        time.Now().UTC().Format(time.RFC3339),
		Summary:          s,
		OutcomeNames:     outcomeNames[:],
		NodeOutcomeNames: nodeOutcomeNames[:],
		Drill:            r.Meta.Drill,
		Late:             s.Outcomes[Late.String()],
		LateLimit:        DefaultMaxLateRatio * 100,
		SafetyChecked:    s.Safety.DoubleGrantsChecked || s.Safety.AuditChecked,
	}
	if s.Requests > 0 {
		share := float64(d.Late) / float64(s.Requests)
		d.LateShare, d.LateBad = share*100, share > DefaultMaxLateRatio
	}
	for i, name := range outcomeNames {
		d.Words = append(d.Words, htmlWord{name, outcomeMeanings[i]})
	}
	d.Words = append(d.Words, htmlWord{"late starts", lateStartsMeaning})
	if len(s.PerNode) > 0 {
		for i, name := range nodeOutcomeNames {
			d.NodeWords = append(d.NodeWords, htmlWord{name, nodeOutcomeMeanings[i]})
		}
	}
	d.SafetyCard, d.SafetyBad = safetyCard(s.Safety)
	d.Rows = latencyRows(s)
	for _, n := range s.PerNode {
		d.Rows = append(d.Rows, htmlRow{strings.TrimSpace(fmt.Sprintf("node%d SET %s", n.Node, n.Addr)), n.LatencyMs})
	}
	for _, t := range s.Thresholds {
		if !t.Pass {
			d.ThresholdsFailed++
		}
	}
	end := r.duration().Seconds()
	redis, etcd, known := r.Meta.lockService()
	for _, f := range r.Faults {
		span := faultSpan{Name: f.Name(), From: f.Start.Sub(r.Meta.Started).Seconds(), Open: f.End.IsZero(), Own: true}
		switch {
		case !known:
		case f.Params[faultlog.EtcdMemberParam] != "":
			span.Own = etcd
		case f.Node > 0:
			span.Own = redis
		}
		if !span.Own {
			span.Name += " (a lock service this guard does not use)"
		}
		if !span.Open {
			span.To = f.End.Sub(r.Meta.Started).Seconds()
		} else {
			span.To = end
		}
		d.Faults = append(d.Faults, span)
	}
	payload := htmlPayload{
		Meta: r.Meta, Summary: s, Series: &r.Series, Faults: d.Faults,
		Spectrum: map[string][]specPoint{},
	}
	for _, tag := range []string{TagE2E, TagE2EUncorrected, TagAcquire, TagHold} {
		payload.Spectrum[tag] = spectrum(r.Totals.ByTag(tag), 1e6)
	}
	d.JSON = marshalJS(payload)
	return d
}

// lateStartsMeaning says what a late start is (see outcomeMeanings).
const lateStartsMeaning = "sent, but later than the lateness tolerance after its scheduled time: the corrected e2e latency counts the wait"

// latencyRows are the latency histograms a run has samples in, in report
// order: a guard without a lock has no lock rows, rather than rows of 0.
func latencyRows(s Summary) []htmlRow {
	var rows []htmlRow
	for _, r := range []htmlRow{
		{"e2e (corrected)", s.E2ELatencyMs}, {"e2e (uncorrected)", s.E2EUncorrectedLatencyMs},
		{"lock acquire", s.AcquireLatencyMs}, {"lock hold", s.HoldLatencyMs}, {"lock release", s.ReleaseLatencyMs},
	} {
		if r.P.Count > 0 || strings.HasPrefix(r.Name, "e2e") {
			rows = append(rows, r)
		}
	}
	return rows
}

// title is the page's title: the drill and its verdict for a guard's run
// in a drill.
func (r *Report) title() string {
	if d := r.Meta.Drill; d != nil {
		t := "drill " + d.Name + ": " + d.Verdict
		if r.Meta.Guard != "" {
			t += " · guard " + r.Meta.Guard
		}
		return t
	}
	return "redlab load report"
}

func (r *Report) subtitle() string {
	m := r.Meta
	parts := []string{"target " + m.Target}
	if m.Guard != "" {
		parts = append(parts, "guard "+m.Guard)
	}
	switch redis, etcd, _ := m.lockService(); {
	case redis && len(m.Nodes) > 0:
		parts = append(parts, fmt.Sprintf("%d Redis lock nodes", len(m.Nodes)))
	case etcd && len(m.Etcd) > 0:
		parts = append(parts, fmt.Sprintf("lock on %d etcd members", len(m.Etcd)))
	case etcd:
		parts = append(parts, "lock on etcd")
	case m.Guard != "" && !redis:
		parts = append(parts, "no lock")
	}
	if m.Replicas > 0 {
		parts = append(parts, fmt.Sprintf("%d replicas", m.Replicas))
	}
	parts = append(parts, "keys "+m.Keys, "profile "+m.Stages)
	if len(m.Sources) > 0 {
		parts = append(parts, fmt.Sprintf("merged from %d runs", len(m.Sources)))
	}
	parts = append(parts, "started "+m.Started.UTC().Format(time.RFC3339))
	return strings.Join(parts, " · ")
}

// marshalJS encodes v for the page's JSON script element. encoding/json
// escapes <, > and &, so the payload cannot close the element.
func marshalJS(v any) template.JS {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte("{}")
	}
	return template.JS(b)
}

func writeHTML(path string, d *htmlData) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	err = reportTmpl.Execute(f, d)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("loadgen: write %s: %w", path, err)
	}
	return nil
}

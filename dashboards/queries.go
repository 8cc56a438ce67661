package dashboards

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
)

// Query is one PromQL expression of the rules or the dashboards.
type Query struct {
	// Where names it: "alerts.rules.yml alert RedisNodeDown",
	// "redlock-lab-locks panel 9 target A", ….
	Where string
	// Kind is "alert", "record", "panel", "annotation" or "variable".
	Kind string
	// Name is the alert's or recorded series' name (rules only).
	Name string
	// Expr is the expression as written, Grafana variables included.
	Expr string
}

// ruleFile is the part of a Prometheus rule file Queries reads.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// Queries returns every expression of the rule files and the dashboards:
// alert and recording rules, panel targets, annotations, and the metric
// and label a variable's label_values reads (as a selector of the metric).
func Queries() ([]Query, error) {
	var out []Query
	files, err := RuleFiles()
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		var rf ruleFile
		if err := yaml.Unmarshal(f.Data, &rf); err != nil {
			return nil, fmt.Errorf("dashboards: %s: %w", f.Name, err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				q := Query{Where: f.Name + " record " + r.Record, Kind: "record", Name: r.Record, Expr: strings.TrimSpace(r.Expr)}
				if r.Alert != "" {
					q.Where, q.Kind, q.Name = f.Name+" alert "+r.Alert, "alert", r.Alert
				}
				out = append(out, q)
			}
		}
	}
	for _, d := range []dashboard{redlockDashboard(), nodesDashboard()} {
		d.finish()
		for _, a := range d.Annotations.List {
			if a.Expr != "" {
				out = append(out, Query{Where: d.UID + " annotation " + a.Name, Kind: "annotation", Expr: a.Expr})
			}
		}
		for _, v := range d.Templating.List {
			if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
				out = append(out, Query{Where: d.UID + " variable " + v.Name, Kind: "variable", Expr: m[1]})
			}
		}
		for _, p := range d.Panels {
			for _, t := range p.Targets {
				out = append(out, Query{Where: fmt.Sprintf("%s panel %d %q target %s", d.UID, p.ID, p.Title, t.RefID), Kind: "panel", Expr: t.Expr})
			}
		}
	}
	return out, nil
}

var labelValues = regexp.MustCompile(`^label_values\(([^,]+),\s*[a-zA-Z_]+\)$`)

// Expand replaces the Grafana variables of e with what Grafana would send
// to Prometheus for a query at the given step: every selected value for
// the dashboard variables, a rate interval of four steps (at least a
// minute, as Grafana does for a 15s scrape), the step, and a range of
// rangeDur.
func Expand(e string, step, rangeDur time.Duration) string {
	rate := max(4*step, time.Minute)
	r := strings.NewReplacer(
		"$__rate_interval", promDuration(rate),
		"$__interval", promDuration(step),
		"$__range", promDuration(rangeDur),
		"$guard", ".*",
		"$node", ".*",
	)
	return r.Replace(e)
}

// promDuration renders d as PromQL writes durations (whole seconds or
// milliseconds).
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

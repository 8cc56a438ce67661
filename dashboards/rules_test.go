package dashboards

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/redlocklab/redlocklab/internal/testenv"
)

// TestPromtool runs the real promtool: the rule files are valid, and the
// unit tests of alerts.test.yml pass.
func TestPromtool(t *testing.T) {
	promtool := testenv.Require(t, "promtool")
	files, err := filepath.Glob("prometheus/*.rules.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("rule files: %v %v", files, err)
	}
	for _, args := range [][]string{
		append([]string{"check", "rules"}, files...),
		{"test", "rules", "prometheus/alerts.test.yml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestEmbeddedRulesAreTheFiles: what the binary provisions is what is in
// git.
func TestEmbeddedRulesAreTheFiles(t *testing.T) {
	files, err := RuleFiles()
	if err != nil {
		t.Fatal(err)
	}
	onDisk, _ := filepath.Glob("prometheus/*.rules.yml")
	if len(files) != len(onDisk) || len(files) < 2 {
		t.Fatalf("embedded %d rule files, %d on disk; want the same, at least 2", len(files), len(onDisk))
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("prometheus", f.Name))
		if err != nil || string(b) != string(f.Data) {
			t.Errorf("%s: embedded copy differs from the file (%v)", f.Name, err)
		}
	}
}

const runbookBase = "https://github.com/redlocklab/redlocklab/blob/main/runbooks/alerts/"

// runbookSections is the template every alert runbook follows, in order.
var runbookSections = []string{"Symptoms", "Impact", "Diagnosis", "Mitigation", "Verification", "Escalation"}

func alertRules(t *testing.T) map[string]Query {
	t.Helper()
	qs, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Query{}
	for _, q := range qs {
		if q.Kind == "alert" {
			out[q.Name] = q
		}
	}
	return out
}

// TestEveryAlertHasItsRunbook: severity, summary, description and a
// runbook_url to runbooks/alerts/<alertname>.md, which exists and follows
// the template; no runbook without its alert.
func TestEveryAlertHasItsRunbook(t *testing.T) {
	b, err := os.ReadFile("prometheus/alerts.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a recording rule (%s) among the alerts", g.Name, r.Record)
				continue
			}
			alerts[r.Alert] = true
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, k := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[k]) == "" {
					t.Errorf("%s: no %s", r.Alert, k)
				}
			}
			if got, want := r.Annotations["runbook_url"], runbookBase+r.Alert+".md"; got != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
			}
			checkRunbook(t, r.Alert)
		}
	}
	if len(alerts) < 11 {
		t.Errorf("got %d alerts, want at least the 11 the lab needs", len(alerts))
	}
	books, _ := filepath.Glob("../runbooks/alerts/*.md")
	for _, p := range books {
		name := strings.TrimSuffix(filepath.Base(p), ".md")
		if name != "README" && !alerts[name] {
			t.Errorf("%s: a runbook for no alert", p)
		}
	}
}

var heading = regexp.MustCompile(`(?m)^## (.+)$`)

func checkRunbook(t *testing.T, alert string) {
	t.Helper()
	p := filepath.Join("..", "runbooks", "alerts", alert+".md")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Errorf("%s: runbook: %v", alert, err)
		return
	}
	text := string(b)
	if !strings.HasPrefix(text, "# "+alert+"\n") {
		t.Errorf("%s: want it to start with \"# %s\"", p, alert)
	}
	var got []string
	for _, m := range heading.FindAllStringSubmatch(text, -1) {
		got = append(got, m[1])
	}
	if !slices.Equal(got, runbookSections) {
		t.Errorf("%s: sections %q, want %q", p, got, runbookSections)
	}
	diag := section(text, "Diagnosis")
	if !strings.Contains(diag, "```promql") || !strings.Contains(diag, "redlab ") {
		t.Errorf("%s: the diagnosis must give the queries (a ```promql block) and the redlab commands", p)
	}
}

// section returns the text under "## name" up to the next heading.
func section(text, name string) string {
	_, rest, ok := strings.Cut(text, "\n## "+name+"\n")
	if !ok {
		return ""
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// TestEveryAlertIsTestedBothWays: alerts.test.yml has, for every alert, an
// evaluation where it fires and one where it does not.
func TestEveryAlertIsTestedBothWays(t *testing.T) {
	b, err := os.ReadFile("prometheus/alerts.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for name := range alertRules(t) {
		if !fires[name] || !quiet[name] {
			t.Errorf("%s: tested firing %v, not firing %v; want both", name, fires[name], quiet[name])
		}
	}
}

func TestCapAlertFor(t *testing.T) {
	rules := "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    for: 2m\n  - alert: B\n    expr: up == 0\n    for: 1s\n  - alert: C\n    expr: up == 0\n  - record: r\n    expr: up\n"
	for _, tc := range []struct {
		max  time.Duration
		want []string
	}{
		{0, []string{"for: 2m", "for: 1s"}},
		{3 * time.Second, []string{"for: 3s", "for: 1s"}},
		{time.Hour, []string{"for: 2m", "for: 1s"}},
	} {
		got, err := capAlertFor([]byte(rules), tc.max)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(got), "    "+w+"\n") {
				t.Errorf("cap %v: got\n%s\nwant it to hold %q", tc.max, got, w)
			}
		}
		if strings.Count(string(got), "for:") != 2 {
			t.Errorf("cap %v: got\n%s\nwant two for: lines, no more", tc.max, got)
		}
	}
	if _, err := capAlertFor([]byte("groups:\n- rules:\n  - alert: A\n    for: soon\n"), time.Second); err == nil {
		t.Error("for: soon: got no error")
	}
}

// TestRuleFilesCapped: the capped files are the files, but for the for:
// of the alerts that waited longer than the cap.
func TestRuleFilesCapped(t *testing.T) {
	files, err := RuleFiles()
	if err != nil {
		t.Fatal(err)
	}
	capped, err := RuleFilesCapped(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(capped) != len(files) {
		t.Fatalf("got %d files, want %d", len(capped), len(files))
	}
	changed := 0
	for i, f := range files {
		was, is := strings.Split(string(f.Data), "\n"), strings.Split(string(capped[i].Data), "\n")
		if capped[i].Name != f.Name || len(is) != len(was) {
			t.Fatalf("%s: got %s with %d lines, want %d lines", f.Name, capped[i].Name, len(is), len(was))
		}
		for j := range was {
			if was[j] == is[j] {
				continue
			}
			changed++
			if want := strings.TrimSuffix(was[j], strings.TrimPrefix(strings.TrimSpace(was[j]), "for: ")) + "1s"; is[j] != want || !strings.HasPrefix(strings.TrimSpace(was[j]), "for: ") {
				t.Errorf("%s line %d: %q became %q, want only a for: capped to 1s", f.Name, j+1, was[j], is[j])
			}
		}
	}
	if changed == 0 {
		t.Error("no for: capped at 1s: the alerts all wait longer than that")
	}
	if same, err := RuleFilesCapped(0); err != nil || !slices.EqualFunc(same, files, func(a, b RuleFile) bool { return string(a.Data) == string(b.Data) }) {
		t.Errorf("cap 0: got changes (%v), want the files as they are", err)
	}
}

package dashboards

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// TestGrafanaFilesUpToDate: the JSON in git is what the generator writes
// (go generate ./dashboards after editing grafana.go).
func TestGrafanaFilesUpToDate(t *testing.T) {
	files, err := Grafana()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, f := range files {
		want[f.Name] = true
		b, err := os.ReadFile(filepath.Join("grafana", f.Name))
		if err != nil {
			t.Errorf("%s: %v (run go generate ./dashboards)", f.Name, err)
			continue
		}
		if string(b) != string(f.Data) {
			t.Errorf("grafana/%s is stale: run go generate ./dashboards", f.Name)
		}
	}
	onDisk, _ := filepath.Glob("grafana/*.json")
	for _, p := range onDisk {
		if !want[filepath.Base(p)] {
			t.Errorf("%s: not generated (remove it, or add it to grafana.go)", p)
		}
	}
}

// rawPanel reads a dashboard file as Grafana will, independently of the
// generator's types.
type rawDashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name       string         `json:"name"`
			Datasource map[string]any `json:"datasource"`
			Expr       string         `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
	Panels []struct {
		ID         int            `json:"id"`
		Type       string         `json:"type"`
		Title      string         `json:"title"`
		Repeat     string         `json:"repeat"`
		MaxPerRow  int            `json:"maxPerRow"`
		Datasource map[string]any `json:"datasource"`
		GridPos    struct {
			H, W, X, Y int
		} `json:"gridPos"`
		Targets []struct {
			RefID      string         `json:"refId"`
			Expr       string         `json:"expr"`
			Datasource map[string]any `json:"datasource"`
			Format     string         `json:"format"`
		} `json:"targets"`
		Options map[string]any `json:"options"`
	} `json:"panels"`
}

var grafanaVar = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)`)

// TestGrafanaDashboardsStrict checks what Grafana would otherwise accept
// silently and draw wrong: unique uids and panel ids, a layout within 24
// columns without overlaps, every query on the dashboard's Prometheus
// variable, unique refIds, every variable used defined, a fault
// annotation, the panels the brief of each dashboard names.
func TestGrafanaDashboardsStrict(t *testing.T) {
	files, _ := filepath.Glob("grafana/*.json")
	if len(files) != 2 {
		t.Fatalf("got %d dashboards, want 2", len(files))
	}
	uids := map[string]bool{}
	titles := map[string][]string{}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var d rawDashboard
		dec := json.NewDecoder(strings.NewReader(string(b)))
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if d.UID == "" || len(d.UID) > 40 || uids[d.UID] || d.Title == "" || d.SchemaVersion < 36 {
			t.Errorf("%s: uid %q title %q schema %d: want a unique uid of at most 40 characters, a title, schema >= 36", p, d.UID, d.Title, d.SchemaVersion)
		}
		uids[d.UID] = true
		vars := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
		for _, v := range d.Templating.List {
			vars[v.Name] = true
		}
		if !vars["datasource"] {
			t.Errorf("%s: no datasource variable", p)
		}
		faults := false
		for _, a := range d.Annotations.List {
			if strings.Contains(a.Expr, "redlab_lab_fault_active") && a.Datasource["uid"] == "${datasource}" {
				faults = true
			}
		}
		if !faults {
			t.Errorf("%s: no annotation shading the lab's faults", p)
		}
		ids := map[int]bool{}
		type rect struct{ x0, y0, x1, y1 int }
		var rects []rect
		for _, pn := range d.Panels {
			where := p + ": panel " + pn.Title
			titles[d.UID] = append(titles[d.UID], pn.Title)
			if ids[pn.ID] || pn.ID <= 0 {
				t.Errorf("%s: id %d repeated or not positive", where, pn.ID)
			}
			ids[pn.ID] = true
			g := pn.GridPos
			if g.W < 1 || g.X < 0 || g.X+g.W > 24 || g.H < 1 || g.Y < 0 {
				t.Errorf("%s: gridPos %+v outside the 24 columns", where, g)
			}
			r := rect{g.X, g.Y, g.X + g.W, g.Y + g.H}
			if pn.Repeat != "" {
				if pn.MaxPerRow < 1 || !vars[pn.Repeat] {
					t.Errorf("%s: repeats over %q (max per row %d): want a defined variable", where, pn.Repeat, pn.MaxPerRow)
				}
				r.x1 = 24 // its copies fill the row
			}
			for _, o := range rects {
				if r.x0 < o.x1 && o.x0 < r.x1 && r.y0 < o.y1 && o.y0 < r.y1 {
					t.Errorf("%s: overlaps another panel (%+v)", where, g)
				}
			}
			rects = append(rects, r)
			if pn.Type == "text" {
				if c, _ := pn.Options["content"].(string); c == "" {
					t.Errorf("%s: empty text", where)
				}
				continue
			}
			if pn.Datasource["uid"] != "${datasource}" || len(pn.Targets) == 0 {
				t.Errorf("%s: datasource %v, %d targets; want the datasource variable and a query", where, pn.Datasource, len(pn.Targets))
			}
			refs := map[string]bool{}
			for _, tg := range pn.Targets {
				if tg.RefID == "" || refs[tg.RefID] || strings.TrimSpace(tg.Expr) == "" || tg.Datasource["uid"] != "${datasource}" {
					t.Errorf("%s: target %q: want a unique refId, an expression and the datasource variable", where, tg.RefID)
				}
				refs[tg.RefID] = true
				if (pn.Type == "heatmap") != (tg.Format == "heatmap") {
					t.Errorf("%s: a %s panel with a %q query", where, pn.Type, tg.Format)
				}
				for _, m := range grafanaVar.FindAllStringSubmatch(tg.Expr, -1) {
					if !vars[m[1]] {
						t.Errorf("%s: uses $%s, which the dashboard does not define", where, m[1])
					}
				}
			}
			for _, m := range grafanaVar.FindAllStringSubmatch(pn.Title, -1) {
				if !vars[m[1]] {
					t.Errorf("%s: title uses $%s, which the dashboard does not define", where, m[1])
				}
			}
		}
	}
	// What each dashboard must show.
	for uid, want := range map[string][]string{
		"redlock-lab-locks": {"Quorum health per node", "Acquire latency (granted)", "Node $node: acquire request latency",
			"Acquire outcomes", "Contention by guard", "Validity left at grant", "Double grants", "Lock violations", "Lab faults"},
		"redlock-lab-nodes": {"appendfsync", "maxmemory-policy", "Role", "Restarts", "AOF fsyncs delayed", "Clock skew", "Lab faults"},
	} {
		have := strings.Join(titles[uid], "\n") + "\n"
		for _, w := range want {
			if !strings.Contains(have, w+"\n") {
				t.Errorf("%s: no panel %q", uid, w)
			}
		}
	}
}

// TestGrafanaProvisioning: the provisioning files parse, load the
// dashboards' folder and name a Prometheus data source.
func TestGrafanaProvisioning(t *testing.T) {
	var dash struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Type    string `yaml:"type"`
			Folder  string `yaml:"folder"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	var src struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
			UID  string `yaml:"uid"`
		} `yaml:"datasources"`
	}
	for _, c := range []struct {
		path string
		v    any
	}{{"grafana/provisioning/dashboards/redlock-lab.yml", &dash}, {"grafana/provisioning/datasources/redlab-prometheus.yml", &src}} {
		b, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, c.v); err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
	}
	if dash.APIVersion != 1 || len(dash.Providers) != 1 || dash.Providers[0].Type != "file" || dash.Providers[0].Options.Path == "" {
		t.Errorf("dashboard provider: got %+v, want one file provider with a path", dash)
	}
	if src.APIVersion != 1 || len(src.Datasources) != 1 || src.Datasources[0].Type != "prometheus" || !strings.HasPrefix(src.Datasources[0].URL, "http://") {
		t.Errorf("data source: got %+v, want one Prometheus", src)
	}
}

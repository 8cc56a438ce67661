package dashboards_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/redlocklab/redlocklab/dashboards"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlockprom"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// family is a metric family's name and type as a registry exposes it.
type family struct {
	name string
	typ  dto.MetricType
}

// series returns the names a family puts in Prometheus (classic
// histograms: _bucket, _sum, _count).
func (f family) series() []string {
	switch f.typ {
	case dto.MetricType_HISTOGRAM:
		return []string{f.name + "_bucket", f.name + "_sum", f.name + "_count"}
	case dto.MetricType_SUMMARY:
		return []string{f.name, f.name + "_sum", f.name + "_count"}
	}
	return []string{f.name}
}

func gatherFamilies(t *testing.T, g prometheus.Gatherer) []family {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []family
	for _, mf := range mfs {
		out = append(out, family{mf.GetName(), mf.GetType()})
	}
	return out
}

// projectFamilies builds, in-process, every registry this project exports
// and drives it until every metric has a series: the lock client's, the
// service's (with a real lock on a real redis-server), the load
// generator's, and the lab supervisors' names.
func projectFamilies(t *testing.T) []family {
	t.Helper()
	var out []family

	reg := prometheus.NewPedanticRegistry()
	m, err := redlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	o := m.Observer()
	o.Observe(redlock.Event{Op: redlock.OpAcquire, Attempt: 1, Quorum: 2, Votes: 2, TTL: time.Second, Validity: 990 * time.Millisecond,
		Breaker: redlock.BreakerClosed, Probe: true, Nodes: []redlock.NodeResult{{Node: 0, Outcome: redlock.Granted, Latency: time.Millisecond}}})
	o.Observe(redlock.Event{Op: redlock.OpAcquire, Attempt: 2, Quorum: 2, Rejected: true, Breaker: redlock.BreakerOpen, Err: redlock.ErrCircuitOpen})
	o.Observe(redlock.Event{Op: redlock.OpExtend, Attempt: 1, Quorum: 2, Votes: 2, Restored: 1, TTL: time.Second, Validity: time.Second})
	o.ObserveAcquire(redlock.AcquireResult{Attempts: 1, Elapsed: time.Millisecond})
	out = append(out, gatherFamilies(t, reg)...)

	c := redlocktest.Start(t, 1, redlocktest.Options{})
	reg = prometheus.NewPedanticRegistry()
	r, err := inventory.OpenReplica(context.Background(), inventory.ReplicaConfig{
		StoreDSN: "sqlite:" + filepath.Join(t.TempDir(), "inv.db"), Guard: inventory.GuardRedlock, Nodes: c.Addrs(),
		NodeTimeout: time.Second, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := r.Store().Seed(context.Background(), "w", 5); err != nil {
		t.Fatal(err)
	}
	h, err := inventory.NewHandler(r.Service(), reg)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/reservations", strings.NewReader(`{"sku":"w","quantity":1,"request_id":"a"}`))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		t.Fatalf("reserve: %d %s", rec.Code, rec.Body)
	}
	out = append(out, gatherFamilies(t, reg)...)

	lm := loadgen.NewMetrics()
	hs := loadgen.NewHistSet(1)
	hs.Outcomes[loadgen.Reserved] = 1
	hs.NodeOutcomes[0][0] = 1
	_ = hs.E2E.RecordValue(int64(time.Millisecond))
	if err := lm.Interval(&loadgen.Interval{Hists: hs}); err != nil {
		t.Fatal(err)
	}
	out = append(out, gatherFamilies(t, lm.Registry())...)

	for _, n := range node.MetricNames() {
		typ := dto.MetricType_GAUGE
		if strings.HasSuffix(n, "_total") {
			typ = dto.MetricType_COUNTER
		}
		out = append(out, family{n, typ})
	}
	return dedupe(out)
}

// dedupe keeps one family per name, and only this project's (the
// generator's registry also holds the Go and process collectors).
func dedupe(fs []family) []family {
	seen := map[string]bool{}
	var out []family
	for _, f := range fs {
		if !strings.HasPrefix(f.name, "redlock_") && !strings.HasPrefix(f.name, "redlab_") {
			continue
		}
		if !seen[f.name] {
			seen[f.name] = true
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// runtimeFamilies are the Go and process collectors every redlab process
// registers.
func runtimeFamilies(t *testing.T) []family {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return gatherFamilies(t, reg)
}

// exporterFamilies runs the real redis_exporter, with the lab's command
// line, against a real redis-server, and returns what it exports.
func exporterFamilies(t *testing.T) []family {
	t.Helper()
	bin := testenv.Require(t, "prometheus-redis-exporter")
	node := redlocktest.Start(t, 1, redlocktest.Options{}).Nodes[0]
	dir := t.TempDir()
	pw := filepath.Join(dir, "passwords.json")
	if err := os.WriteFile(pw, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", redlocktest.FreePort(t))
	cmd := exec.Command(bin, lab.ExporterArgs(node.Addr, "", pw, addr, time.Second, "")...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			p := expfmt.NewTextParser(model.UTF8Validation)
			mfs, perr := p.TextToMetricFamilies(resp.Body)
			resp.Body.Close()
			if perr != nil {
				t.Fatal(perr)
			}
			if up := mfs["redis_up"]; up != nil && up.GetMetric()[0].GetGauge().GetValue() == 1 {
				var out []family
				for n, mf := range mfs {
					out = append(out, family{n, mf.GetType()})
				}
				return out
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis_exporter on %s: no redis_up 1 within 20s (last error %v)", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// prometheusSeries are the series Prometheus itself makes.
var prometheusSeries = []string{"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds"}

// metricNames returns the metric names an expression selects.
func metricNames(t *testing.T, expr parser.Expr) []string {
	t.Helper()
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			t.Errorf("a selector without a metric name: %s", vs)
		}
		names = append(names, name)
		return nil
	})
	return names
}

var promqlParser = parser.NewParser(parser.Options{})

// TestQueriesParseAndNameKnownMetrics: every expression of the rules and
// dashboards (Grafana's variables expanded as Grafana would) and of the
// runbooks' diagnosis blocks parses and selects only series this project,
// redis_exporter (as the lab runs it), the Go and process collectors, the
// recording rules or Prometheus itself produce. Every recording rule is
// used by a dashboard or an alert.
func TestQueriesParseAndNameKnownMetrics(t *testing.T) {
	known := map[string]string{}
	add := func(src string, fs []family) {
		for _, f := range fs {
			for _, s := range f.series() {
				known[s] = src
			}
		}
	}
	add("project", projectFamilies(t))
	add("go/process collectors", runtimeFamilies(t))
	add("redis_exporter", exporterFamilies(t))
	for _, s := range prometheusSeries {
		known[s] = "prometheus"
	}
	qs, err := dashboards.Queries()
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	for _, q := range qs {
		if q.Kind == "record" {
			known[q.Name] = "recording rule"
			recorded[q.Name] = false
		}
	}
	kinds := map[string]int{}
	for _, q := range qs {
		kinds[q.Kind]++
		e := dashboards.Expand(q.Expr, 15*time.Second, time.Hour)
		expr, err := promqlParser.ParseExpr(e)
		if err != nil {
			t.Errorf("%s: %v\n%s", q.Where, err, e)
			continue
		}
		for _, n := range metricNames(t, expr) {
			if _, ok := known[n]; !ok {
				t.Errorf("%s: selects %s, which nothing exports", q.Where, n)
			}
			if _, ok := recorded[n]; ok && q.Kind != "record" {
				recorded[n] = true
			}
		}
	}
	// The runbooks' diagnosis queries, one per line of their promql blocks.
	books, _ := filepath.Glob("../runbooks/alerts/*.md")
	for _, book := range books {
		b, err := os.ReadFile(book)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range promqlBlock.FindAllStringSubmatch(string(b), -1) {
			for _, line := range strings.Split(block[1], "\n") {
				if strings.TrimSpace(line) == "" {
					continue
				}
				expr, err := promqlParser.ParseExpr(line)
				if err != nil {
					t.Errorf("%s, promql block %d: %v\n%s", book, i+1, err, line)
					continue
				}
				for _, n := range metricNames(t, expr) {
					if _, ok := known[n]; !ok {
						t.Errorf("%s: %q selects %s, which nothing exports", book, line, n)
					}
				}
				kinds["runbook"]++
			}
		}
	}
	for name, used := range recorded {
		if !used {
			t.Errorf("recording rule %s: no dashboard or alert uses it", name)
		}
	}
	for _, k := range []string{"alert", "record", "panel", "annotation", "variable", "runbook"} {
		if kinds[k] == 0 {
			t.Errorf("no %s query found: the extraction is broken", k)
		}
	}
}

var promqlBlock = regexp.MustCompile("(?s)```promql\n(.*?)```")

var readmeRow = regexp.MustCompile("(?m)^\\| `([a-z_:]+)` \\| (counter|gauge|histogram|summary) \\|")

// TestREADMEListsEveryMetric: dashboards/README.md has a row, with the
// right type, for every metric this project exports, and none for a metric
// it does not.
func TestREADMEListsEveryMetric(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, m := range readmeRow.FindAllStringSubmatch(string(b), -1) {
		listed[m[1]] = m[2]
	}
	for _, f := range projectFamilies(t) {
		want := strings.ToLower(f.typ.String())
		got, ok := listed[f.name]
		switch {
		case !ok:
			t.Errorf("README.md: no row for %s (%s)", f.name, want)
		case got != want:
			t.Errorf("README.md: %s listed as a %s, it is a %s", f.name, got, want)
		}
		delete(listed, f.name)
	}
	for name := range listed {
		t.Errorf("README.md lists %s, which nothing exports", name)
	}
}

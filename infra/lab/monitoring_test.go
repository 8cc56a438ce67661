package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/redlocklab/redlocklab/internal/proc"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// scrape reads a /metrics endpoint into its families, and fails the test
// on anything promlint finds in them.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.New(bytes.NewReader(b)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// sample returns the value of the series of name whose labels include
// want, and whether there is one.
func sample(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		n := 0
		for _, lp := range m.GetLabel() {
			if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
				n++
			}
		}
		if n != len(want) {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// TestNodeMetrics: the supervisor's /metrics follows a kill from the fault
// to the restart, and measures the downtime the restart guard imposed.
func TestNodeMetrics(t *testing.T) {
	l := runTestSupervisor(t, prepareTestNode(t))
	ctl := l.Nodes()[0].Control
	mfs := scrape(t, ctl)
	for _, k := range FaultKinds() {
		if v, ok := sample(mfs, "redlab_lab_fault_active", map[string]string{"node": "1", "fault": string(k)}); !ok || v != 0 {
			t.Errorf("fault_active{%s} before any fault: got %v (present %v), want 0", k, v, ok)
		}
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"redlab_lab_node_state", map[string]string{"node": "1", "state": "up"}, 1},
		{"redlab_lab_node_state", map[string]string{"node": "1", "state": "waiting"}, 0},
		{"redlab_lab_node_restarts_total", map[string]string{"node": "1"}, 0},
		{"redlab_lab_node_restart_delay_seconds", map[string]string{"node": "1"}, testGuardDelay.Seconds()},
	} {
		if v, ok := sample(mfs, tc.name, tc.labels); !ok || v != tc.want {
			t.Errorf("%s%v: got %v (present %v), want %v", tc.name, tc.labels, v, ok, tc.want)
		}
	}
	if _, ok := sample(mfs, "redlab_lab_node_crash_downtime_seconds", nil); ok {
		t.Error("crash downtime before any crash: want absent")
	}
	if _, ok := sample(mfs, "redlab_lab_node_clock_offset_seconds", map[string]string{"node": "1"}); !ok {
		t.Error("clock offset of a node that answers: want present")
	}

	ctx := context.Background()
	if _, err := l.Kill(ctx, 1); err != nil {
		t.Fatal(err)
	}
	mfs = scrape(t, ctl)
	if v, _ := sample(mfs, "redlab_lab_fault_active", map[string]string{"fault": "kill"}); v != 1 {
		t.Errorf("fault_active{kill} right after the kill: got %v, want 1", v)
	}
	if v, _ := sample(mfs, "redlab_lab_node_state", map[string]string{"state": "up"}); v != 0 {
		t.Errorf("state up right after the kill: got %v, want 0", v)
	}
	eventually(t, 20*time.Second, "node up again", func() error {
		if st := status(t, l, 1); st.State != NodeUp {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
	mfs = scrape(t, ctl)
	if v, _ := sample(mfs, "redlab_lab_fault_active", map[string]string{"fault": "kill"}); v != 0 {
		t.Errorf("fault_active{kill} once the node answers: got %v, want 0", v)
	}
	if v, _ := sample(mfs, "redlab_lab_node_restarts_total", nil); v != 1 {
		t.Errorf("restarts after one kill: got %v, want 1", v)
	}
	// The guard held the restart for its delay: the downtime cannot be
	// shorter (a lower bound set by the guard's sleep, not a timing).
	if v, ok := sample(mfs, "redlab_lab_node_crash_downtime_seconds", nil); !ok || v < testGuardDelay.Seconds() {
		t.Errorf("crash downtime: got %v (present %v), want at least the guard's %v", v, ok, testGuardDelay)
	}
}

func TestCapAlertFor(t *testing.T) {
	rules := "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    for: 2m\n  - alert: B\n    expr: up == 0\n    for: 1s\n  - alert: C\n    expr: up == 0\n"
	for _, tc := range []struct {
		max  time.Duration
		want []string
	}{
		{0, []string{"for: 2m", "for: 1s"}},
		{3 * time.Second, []string{"for: 3s", "for: 1s"}},
		{time.Hour, []string{"for: 2m", "for: 1s"}},
	} {
		got, err := CapAlertFor([]byte(rules), tc.max)
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
	if _, err := CapAlertFor([]byte("    for: soon\n"), time.Second); err == nil {
		t.Error("for: soon: got no error")
	}
}

// promQuery runs an instant query against a Prometheus and returns the
// result's vector.
func promQuery(t *testing.T, base, q string) model.Vector {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.Status != "success" {
		t.Fatalf("query %s: %s", q, body.Error)
	}
	var v model.Vector
	if body.Data.ResultType == "vector" {
		if err := json.Unmarshal(body.Data.Result, &v); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// TestMonitoringInProcess runs the real exporter and Prometheus against an
// in-process supervised node: both jobs of the lab are scraped, a
// registered target comes and goes, and StopMonitoring leaves nothing.
func TestMonitoringInProcess(t *testing.T) {
	testenv.Require(t, "prometheus")
	testenv.Require(t, "prometheus-redis-exporter")
	l := runTestSupervisor(t, prepareTestNode(t))
	l.f.BasePort = redistest.FreeStableBasePort(t, 1, monitoringPortOffset-1, monitoringPortOffset) // Prometheus, the exporter
	ctx := context.Background()
	t.Cleanup(func() {
		if err := StopMonitoring(context.Background(), l.StateDir()); err != nil {
			t.Error(err)
		}
	})
	m, err := l.StartMonitoring(ctx, MonitoringConfig{ScrapeInterval: 200 * time.Millisecond, AlertForMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := l.Monitoring(); err != nil || got.URL != m.URL || len(got.Exporters) != 1 {
		t.Fatalf("Monitoring(): got %+v, %v; want the record of %s with one exporter", got, err, m.URL)
	}
	if info, err := os.Stat(filepath.Join(monitoringDir(l.StateDir()), exporterPassFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("exporter password file: %v, %v; want mode 0600", info, err)
	}

	// A service registers; Prometheus finds it through file_sd.
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "redlab_test_answer", Help: "Always 42."}, func() float64 { return 42 }))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	unregister, err := RegisterTarget(l.StateDir(), JobServe, strings.TrimPrefix(srv.URL, "http://"), map[string]string{"replica": "a"})
	if err != nil {
		t.Fatal(err)
	}
	waitQuery := func(q string, want func(model.Vector) bool, what string) {
		t.Helper()
		eventually(t, 60*time.Second, what, func() error {
			if v := promQuery(t, m.URL, q); !want(v) {
				return fmt.Errorf("%s = %v", q, v)
			}
			return nil
		})
	}
	one := func(v model.Vector) bool { return len(v) == 1 && v[0].Value == 1 }
	waitQuery(`up{job="redis",node="1"}`, one, "exporter scraped")
	waitQuery(`redis_up{node="1"}`, one, "exporter reaches redis-server")
	waitQuery(`up{job="redlab-lab"}`, one, "supervisor scraped")
	waitQuery(`redlab_lab_node_state{node="1",state="up"}`, one, "supervisor metrics")
	waitQuery(`redlab_test_answer{job="redlab-serve",replica="a"}`, func(v model.Vector) bool { return len(v) == 1 && v[0].Value == 42 }, "registered target")
	unregister()
	unregister()
	waitQuery(`up{job="redlab-serve"}`, func(v model.Vector) bool { return len(v) == 0 }, "unregistered target dropped")

	// The rules were loaded, with the for: capped.
	resp, err := http.Get(m.URL + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Type     string  `json:"type"`
					Duration float64 `json:"duration"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&rules)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for _, g := range rules.Data.Groups {
		for _, r := range g.Rules {
			if r.Type == "alerting" {
				alerts++
				if r.Duration > 1 {
					t.Errorf("an alert holds for %vs, want at most the 1s cap", r.Duration)
				}
			}
		}
	}
	if alerts == 0 {
		t.Error("Prometheus loaded no alerting rule")
	}

	// A second start keeps the processes and reloads.
	again, err := l.StartMonitoring(ctx, m.Config())
	if err != nil {
		t.Fatal(err)
	}
	if again.PID != m.PID || again.Exporters[0].PID != m.Exporters[0].PID {
		t.Errorf("second start: got pids %d/%d, want the running %d/%d", again.PID, again.Exporters[0].PID, m.PID, m.Exporters[0].PID)
	}
	if _, err := RegisterTarget(l.StateDir(), "bogus", "127.0.0.1:1", nil); err == nil {
		t.Error("RegisterTarget with an unknown job: got no error")
	}

	if err := StopMonitoring(ctx, l.StateDir()); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{m.PID, m.Exporters[0].PID} {
		if proc.Alive(pid) {
			t.Errorf("pid %d alive after StopMonitoring", pid)
		}
	}
	if _, err := os.Stat(monitoringDir(l.StateDir())); !os.IsNotExist(err) {
		t.Errorf("monitoring directory after StopMonitoring: %v, want gone", err)
	}
	if _, err := RegisterTarget(l.StateDir(), JobServe, "127.0.0.1:1", nil); err != ErrNoMonitoring {
		t.Errorf("RegisterTarget without monitoring: got %v, want ErrNoMonitoring", err)
	}
}

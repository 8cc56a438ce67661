package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
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
	"github.com/prometheus/common/model"

	"github.com/redlocklab/redlocklab/internal/faultcheck"
	"github.com/redlocklab/redlocklab/internal/proc"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

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
	spec := faultcheck.PrepareNode(t, t.TempDir(), "appendonly yes\nappendfsync always\n")
	faultcheck.RunSupervisor(t, spec)
	l := &Lab{stateDir: spec.StateDir, f: labFile{
		Config: Config{
			Profile:  profile.Profile{Nodes: 1, RestartDelay: time.Duration(spec.RestartDelay), Persistence: []Persistence{PersistAlways}},
			BasePort: redistest.FreeStableBasePort(t, 1, monitoringPortOffset-1, monitoringPortOffset), // Prometheus, the exporter
		},
		Endpoints: []Node{{
			ID: 1, Addr: fmt.Sprintf("127.0.0.1:%d", spec.Port),
			RedisAddr: fmt.Sprintf("127.0.0.1:%d", spec.RedisPort),
			Control:   fmt.Sprintf("127.0.0.1:%d", spec.ControlPort),
		}},
	}}
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
		faultcheck.Eventually(t, 60*time.Second, what, func() error {
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

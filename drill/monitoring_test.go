package drill

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/dashboards"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// monitoredSpec is a short drill: one guard, one node killed and held down
// by its restart guard long enough for the node-down alert (its for: capped
// at 5s by drill --monitoring) to fire.
const monitoredSpec = `---
drill: monitored
title: a short drill recorded by the lab's Prometheus
lab: {nodes: 3, persistence: always, restart_delay: 10s}
workload: {guards: [redlock], rate: 20, duration: 25s, keys: uniform:100, lock_ttl: 5s, seed: 1}
faults:
  - {at: 5s, fault: kill, nodes: [2]}
expect:
  redlock: ["safety.lock_violations==0", "safety.lost_updates==0"]
---

# A monitored drill

For the tests.
`

// TestDrillMonitoringKeepsItsData runs a drill with --monitoring, then
// serves the Prometheus data it kept with the view.yml written next to it,
// as its documentation says, and checks that the dashboards show the drill:
// every panel, annotation and variable query and every recording rule
// returns data over the drill's time, the kill shows as a fault band, and
// the node-down alert fired.
func TestDrillMonitoringKeepsItsData(t *testing.T) {
	if testing.Short() {
		t.Skip("a drill takes half a minute")
	}
	cfg := requireLab(t)
	promBin := testenv.Require(t, "prometheus")
	testenv.Require(t, "prometheus-redis-exporter")
	dir := t.TempDir()
	spec := filepath.Join(dir, "monitored.md")
	if err := os.WriteFile(spec, []byte(monitoredSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	from := time.Now()
	cmd := exec.Command(cfg.Redlab, "drill", spec, "--out", out, "--monitoring")
	cmd.Env = append(os.Environ(), "REDLAB_TF="+cfg.Terraform)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redlab drill --monitoring: %v\n%s", err, b)
	}
	to := time.Now()

	pdir := filepath.Join(out, "monitored", PrometheusDir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	view := exec.Command(promBin, "--config.file", filepath.Join(pdir, "view.yml"), "--storage.tsdb.path", filepath.Join(pdir, "data"),
		"--storage.tsdb.retention.time", "3650d", "--web.listen-address", addr)
	view.Stdout, view.Stderr = nil, nil
	if err := view.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		view.Process.Kill()
		view.Wait()
	})
	base := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus on the drill's data: not ready within 60s (%v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	rangeHasData := func(q string) (bool, error) {
		resp, err := http.Get(base + "/api/v1/query_range?" + url.Values{
			"query": {q}, "start": {strconv.FormatInt(from.Unix(), 10)}, "end": {strconv.FormatInt(to.Unix()+1, 10)}, "step": {"1s"},
		}.Encode())
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		var body struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []struct {
					Values [][]any `json:"values"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return false, err
		}
		if body.Status != "success" {
			return false, fmt.Errorf("%s", body.Error)
		}
		for _, s := range body.Data.Result {
			for _, v := range s.Values {
				if f, err := strconv.ParseFloat(fmt.Sprint(v[1]), 64); err == nil && !math.IsNaN(f) {
					return true, nil
				}
			}
		}
		return false, nil
	}

	qs, err := dashboards.Queries()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, q := range qs {
		if q.Kind == "alert" {
			continue
		}
		e := dashboards.Expand(q.Expr, time.Second, to.Sub(from))
		ok, err := rangeHasData(e)
		if err != nil || !ok {
			t.Errorf("%s: no data in the drill's Prometheus (%v):\n%s", q.Where, err, e)
		}
		checked++
	}
	for _, q := range []string{
		`max_over_time(redlab_lab_fault_active{fault="kill", node="2"}[1m]) == 1`,
		`redlab_inventory_reservations_total{job="redlab-drill", drill="monitored", guard="redlock", outcome="reserved"} > 0`,
		`redlab_load_operations_total{job="redlab-drill", guard="redlock", outcome="reserved"} > 0`,
		`ALERTS{alertname="RedisNodeDown", alertstate="firing", node="2"}`,
	} {
		if ok, err := rangeHasData(q); err != nil || !ok {
			t.Errorf("no data for %s (%v)", q, err)
		}
	}
	t.Logf("%d dashboard and recording rule queries returned data from the drill's kept Prometheus data", checked)
}

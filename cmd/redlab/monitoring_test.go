package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/dashboards"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/internal/proc"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// prom is a client of a real Prometheus's HTTP API.
type prom struct {
	t    *testing.T
	base string
}

type promSeries struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
	Values [][]any           `json:"values"`
}

func (p prom) get(path string, params url.Values, out any) error {
	resp, err := http.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	if body.Status != "success" {
		return fmt.Errorf("%s %v: %s", path, params, body.Error)
	}
	return json.Unmarshal(body.Data, out)
}

// rangeQuery returns the series of q over [from, to] at step.
func (p prom) rangeQuery(q string, from, to time.Time, step time.Duration) ([]promSeries, error) {
	var data struct {
		Result []promSeries `json:"result"`
	}
	err := p.get("/api/v1/query_range", url.Values{
		"query": {q}, "start": {strconv.FormatInt(from.Unix(), 10)}, "end": {strconv.FormatInt(to.Unix()+1, 10)},
		"step": {step.String()},
	}, &data)
	return data.Result, err
}

// instant returns the series of q now.
func (p prom) instant(q string) ([]promSeries, error) {
	var data struct {
		Result []promSeries `json:"result"`
	}
	err := p.get("/api/v1/query", url.Values{"query": {q}}, &data)
	return data.Result, err
}

// alertState returns the state of the named alert ("firing", "pending",
// or "" when inactive).
func (p prom) alertState(name string) string {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.get("/api/v1/alerts", nil, &data); err != nil {
		p.t.Fatal(err)
	}
	state := ""
	for _, a := range data.Alerts {
		if a.Labels["alertname"] == name && (state == "" || a.State == "firing") {
			state = a.State
		}
	}
	return state
}

// hasData reports whether some series holds a value that is a number.
func hasData(ss []promSeries) bool {
	for _, s := range ss {
		for _, v := range s.Values {
			if str, ok := v[1].(string); ok {
				if f, err := strconv.ParseFloat(str, 64); err == nil && !math.IsNaN(f) {
					return true
				}
			}
		}
	}
	return false
}

// waitFor polls cond every 250ms until it holds or limit passes (a bounded
// wait on a condition, not a timing assertion).
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// signals splits an alert expression into what it watches: the sides of
// and/or/unless, each without its comparison to a constant.
func signals(e parser.Expr) []parser.Expr {
	switch n := e.(type) {
	case *parser.ParenExpr:
		return signals(n.Expr)
	case *parser.BinaryExpr:
		switch {
		case n.Op == parser.LAND || n.Op == parser.LOR || n.Op == parser.LUNLESS:
			return append(signals(n.LHS), signals(n.RHS)...)
		case n.Op.IsComparisonOperator():
			if _, ok := n.RHS.(*parser.NumberLiteral); ok {
				return signals(n.LHS)
			}
			if _, ok := n.LHS.(*parser.NumberLiteral); ok {
				return signals(n.RHS)
			}
			return append(signals(n.LHS), signals(n.RHS)...)
		}
	}
	return []parser.Expr{e}
}

// TestLabMonitoringEndToEnd brings a three-node lab up with --monitoring
// (real terraform, redis-server, redis_exporter and Prometheus), runs two
// loads that register their metrics with it and a fault sequence, then asks
// the real Prometheus whether every dashboard and rule expression returned
// data, and which alerts fired.
//
// The sequence, and what it makes each alert do:
//
//   - node 2 runs appendfsync everysec for the whole test:
//     RedisNodeNotFsyncAlways fires from the start;
//   - load A (guard redlock, 30/s, lock TTL 60s, 200 keys);
//   - load B (guard redlock-fenced, 10/s, one key, lock TTL 20ms, holds of
//     250ms: every hold outlives its lock, and the request due 100ms later
//     takes the expired lock while the first still holds; overload control
//     off, so that exhausted attempts retry): RedlockDoubleGrant fires, and
//     RedlockValidityMarginShrinking (a 20ms TTL keeps at most 89% of
//     itself after the drift allowance);
//   - node 3's maxmemory-policy set to allkeys-lru for a moment:
//     RedisNodeEvictionPolicy fires and resolves;
//   - node 2 killed, held down 40s by its restart guard: RedisNodeDown
//     fires and resolves when it is back; RedlockNodeUnreachable (more than
//     half of a minute's requests to it failed) and RedlockQuorumAtRisk
//     (two of three answer) fire; once back, RedisNodeRestartedEarly (40s
//     down, less than load A's 60s TTL).
//
// RedlockAcquireLatencyHigh, RedlockRetryStorm and RedlockLockViolation
// are not provoked (their promtool tests cover firing): for them the series
// they watch, without their thresholds, must return data. Alerts' for: is
// capped at 2s, scrapes every second.
func TestLabMonitoringEndToEnd(t *testing.T) {
	bin, _ := testenv.RequireLab(t, lab.FindTerraform)
	testenv.Require(t, "prometheus")
	testenv.Require(t, "prometheus-redis-exporter")
	infra := filepath.Join(testenv.RepoRoot(t), "infra")
	dir := filepath.Join(t.TempDir(), "state")
	base := redistest.FreeStableBasePort(t, 3, append(lab.PortOffsets(0), lab.MonitoringPortOffsets()...)...)
	redlab := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), envStateDir+"="+dir, envNodes+"=")
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	t.Cleanup(func() {
		if code, out := redlab("lab", "down"); code != 0 {
			t.Errorf("lab down: exit %d\n%s", code, out)
		}
	})

	code, out := redlab("lab", "up", "--count", "3", "--base-port", strconv.Itoa(base), "--infra-dir", infra,
		"--persistence", "always,everysec,always", "--restart-delay", "40s",
		"--monitoring", "--scrape-interval", "1s", "--alert-for-max", "2s")
	if code != 0 {
		t.Fatalf("lab up --monitoring: exit %d\n%s", code, out)
	}
	promURL := fmt.Sprintf("http://127.0.0.1:%d", base+500)
	if !strings.Contains(out, "monitoring  Prometheus "+promURL) {
		t.Errorf("lab up: want the Prometheus URL %s in:\n%s", promURL, out)
	}
	if code, out := redlab("lab", "status"); code != 0 || !strings.Contains(out, "monitoring: Prometheus "+promURL) {
		t.Errorf("lab status: exit %d, want the Prometheus URL in:\n%s", code, out)
	}
	l, err := lab.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	first, err := l.Monitoring()
	if err != nil {
		t.Fatal(err)
	}
	// A later lab up keeps the monitoring, and its processes.
	if code, out := redlab("lab", "up"); code != 0 || !strings.Contains(out, "monitoring  Prometheus "+promURL) {
		t.Errorf("lab up again: exit %d, want the monitoring kept in:\n%s", code, out)
	}
	if again, err := l.Monitoring(); err != nil || again.PID != first.PID || again.Exporters[1].PID != first.Exporters[1].PID {
		t.Errorf("lab up again: monitoring %+v, %v; want the same Prometheus (pid %d) and exporters", again, err, first.PID)
	}
	creds, err := l.Credentials()
	if err != nil {
		t.Fatal(err)
	}
	p := prom{t: t, base: promURL}
	start := time.Now()

	// The two loads run as a user runs them, against the exported lab.
	runs := t.TempDir()
	loadEnv := append(os.Environ(), exportEnv(l)...)
	var wg sync.WaitGroup
	loadOut := make([]string, 2)
	loadErr := make([]error, 2)
	for i, args := range [][]string{
		{"load", "--guard", "redlock", "--worker", "0/2", "--rate", "60", "--duration", "90s", "--keys", "uniform:400",
			"--lock-ttl", "60s", "--node-timeout", "250ms", "--acquire-timeout", "5s", "--metrics-addr", "127.0.0.1:0",
			"--interval", "1s", "--out", filepath.Join(runs, "a")},
		{"load", "--guard", "redlock-fenced", "--worker", "1/2", "--rate", "20", "--duration", "90s", "--keys", "uniform:2",
			"--lock-ttl", "20ms", "--hold", "250ms", "--node-timeout", "250ms", "--acquire-timeout", "2s", "--metrics-addr", "127.0.0.1:0",
			// A 20ms TTL leaves little validity on a loaded machine: the
			// retry budget would turn most exhausted attempts' retries
			// away, and too few grants would overlap. This load is about
			// the alerts, so its attempts retry until the acquire timeout.
			"--overload-control=false",
			"--interval", "1s", "--out", filepath.Join(runs, "b")},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Env = loadEnv
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := cmd.CombinedOutput()
			loadOut[i], loadErr[i] = string(o), err
		}()
	}
	defer wg.Wait()

	// Both loads registered, and their reservations reach Prometheus.
	waitFor(t, 60*time.Second, "both loads scraped", func() bool {
		// Any outcome: most of load B's writes are fenced (its holders
		// outlive their locks by design).
		ss, _ := p.instant(`sum by (guard) (redlab_inventory_reservations_total{job="redlab-load"}) > 0`)
		return len(ss) == 2
	})
	waitFor(t, 30*time.Second, "RedisNodeNotFsyncAlways firing for node 2", func() bool { return p.alertState("RedisNodeNotFsyncAlways") == "firing" })

	// Node 3 may evict for a moment.
	admin := redis.NewClient(&redis.Options{Addr: l.Nodes()[2].RedisAddr, Username: creds.Admin.Name, Password: creds.Admin.Password})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "RedisNodeEvictionPolicy firing", func() bool { return p.alertState("RedisNodeEvictionPolicy") == "firing" })
	if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "RedisNodeEvictionPolicy resolved", func() bool { return p.alertState("RedisNodeEvictionPolicy") == "" })

	// Node 2 crashes and is held down by its restart guard.
	if code, out := redlab("fault", "kill", "2"); code != 0 {
		t.Fatalf("fault kill 2: exit %d\n%s", code, out)
	}
	waitFor(t, 30*time.Second, "RedisNodeDown firing during the fault", func() bool { return p.alertState("RedisNodeDown") == "firing" })
	waitFor(t, 40*time.Second, "RedlockNodeUnreachable firing", func() bool { return p.alertState("RedlockNodeUnreachable") == "firing" })
	waitFor(t, 60*time.Second, "node 2 back", func() bool {
		ss, _ := p.instant(`redis_up{node="2"} == 1`)
		return len(ss) == 1
	})
	waitFor(t, 30*time.Second, "RedisNodeDown resolved after the fault", func() bool { return p.alertState("RedisNodeDown") == "" })
	waitFor(t, 30*time.Second, "RedisNodeRestartedEarly firing", func() bool { return p.alertState("RedisNodeRestartedEarly") == "firing" })

	wg.Wait()
	for i, err := range loadErr {
		if err != nil {
			t.Fatalf("load %c: %v\n%s", 'a'+i, err, loadOut[i])
		}
		if !strings.Contains(loadOut[i], "metrics registered with the lab's Prometheus (job redlab-load") {
			t.Errorf("load %c did not register with the lab's Prometheus:\n%s", 'a'+i, loadOut[i])
		}
	}
	// Let the last scrapes and evaluations in.
	time.Sleep(3 * time.Second)
	end := time.Now()

	// Every alert that the sequence provokes fired at some point.
	for _, name := range []string{"RedisNodeDown", "RedlockNodeUnreachable", "RedlockQuorumAtRisk", "RedisNodeRestartedEarly",
		"RedisNodeNotFsyncAlways", "RedisNodeEvictionPolicy", "RedlockDoubleGrant", "RedlockValidityMarginShrinking"} {
		ss, err := p.rangeQuery(fmt.Sprintf(`ALERTS{alertname=%q, alertstate="firing"}`, name), start, end, time.Second)
		if err != nil || !hasData(ss) {
			t.Errorf("alert %s never fired during the test (%v)", name, err)
			if name == "RedlockDoubleGrant" {
				got, _ := p.instant(`redlab_load_double_grants_total`)
				t.Logf("redlab_load_double_grants_total now: %+v\nload b:\n%s", got, lastLines(loadOut[1], 40))
			}
		}
	}
	signalOnly := map[string]bool{"RedlockAcquireLatencyHigh": true, "RedlockRetryStorm": true, "RedlockLockViolation": true}

	// Every expression of the rules and dashboards returned data at some
	// point; alerts through what they watch.
	qs, err := dashboards.Queries()
	if err != nil {
		t.Fatal(err)
	}
	pq := parser.NewParser(parser.Options{})
	for _, q := range qs {
		expr := dashboards.Expand(q.Expr, time.Second, end.Sub(start))
		checks := []string{expr}
		if q.Kind == "alert" {
			if !signalOnly[q.Name] {
				continue // checked above by its firing
			}
			e, err := pq.ParseExpr(expr)
			if err != nil {
				t.Errorf("%s: %v", q.Where, err)
				continue
			}
			checks = checks[:0]
			for _, s := range signals(e) {
				checks = append(checks, s.String())
			}
		}
		for _, c := range checks {
			ss, err := p.rangeQuery(c, start, end, time.Second)
			if err != nil || !hasData(ss) {
				t.Errorf("%s: no data during the test (%v):\n%s", q.Where, err, c)
			}
		}
	}

	// The exporters logged in as monitor and every command they ran was
	// allowed.
	if ss, err := p.instant(`max(redis_exporter_last_scrape_error)`); err != nil || len(ss) != 1 || ss[0].Value[1] != "0" {
		t.Errorf("exporter scrape errors: got %v, %v; want 0", ss, err)
	}
	for _, n := range l.Nodes() {
		c := redis.NewClient(&redis.Options{Addr: n.RedisAddr, Username: creds.Admin.Name, Password: creds.Admin.Password})
		entries, err := c.Do(ctx, "ACL", "LOG").Slice()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.Contains(fmt.Sprint(e), "monitor") {
				t.Errorf("node %d: ACL denied the monitor user: %v", n.ID, e)
			}
		}
	}

	mon, err := l.Monitoring()
	if err != nil {
		t.Fatal(err)
	}
	if code, out := redlab("lab", "down"); code != 0 {
		t.Fatalf("lab down: exit %d\n%s", code, out)
	}
	for _, pid := range append([]int{mon.PID}, exporterPIDs(mon)...) {
		if proc.Alive(pid) {
			t.Errorf("pid %d still running after lab down", pid)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s after lab down: %v, want it gone", dir, err)
	}
}

// exportEnv is the environment `lab up` exports for l.
func exportEnv(l *lab.Lab) []string {
	var env []string
	for _, v := range labExports(l) {
		env = append(env, v.name+"="+v.value)
	}
	return env
}

func exporterPIDs(m *lab.Monitoring) []int {
	var out []int
	for _, e := range m.Exporters {
		out = append(out, e.PID)
	}
	return out
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

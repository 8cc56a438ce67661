package loadgen

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// dumpDOM loads a page in headless Chromium, lets its scripts run, and
// returns the resulting DOM.
func dumpDOM(t *testing.T, page string) string {
	t.Helper()
	bin := testenv.Require(t, "chromium")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom", "file://"+page)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return string(out)
}

var chartRE = regexp.MustCompile(`<div class="chart" id="chart-([a-z0-9-]+)"[^>]*>`)

type renderedChart struct {
	rendered string
	points   int
}

func charts(t *testing.T, dom string) map[string]renderedChart {
	t.Helper()
	out := map[string]renderedChart{}
	for _, m := range chartRE.FindAllStringSubmatch(dom, -1) {
		attr := func(name string) string {
			am := regexp.MustCompile(name + `="([^"]*)"`).FindStringSubmatch(m[0])
			if am == nil {
				return ""
			}
			return am[1]
		}
		n, _ := strconv.Atoi(attr("data-points"))
		out[m[1]] = renderedChart{rendered: attr("data-rendered"), points: n}
	}
	return out
}

func TestReportRendersInChromium(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	r, _ := executeRun(t, dir, runOpts{rate: 500, d: 1500 * time.Millisecond, lock: true, interval: 250 * time.Millisecond,
		ths: []string{"acquire.p99<1s", "requests==1"}})
	start := r.Meta.Started
	appendFaults(t, dir, faultlog.Fault{ID: "n1-kill", Node: 1, Kind: "kill", Start: start.Add(500 * time.Millisecond), End: start.Add(time.Second)})
	r, err := LoadReport(dir)
	if err != nil {
		t.Fatal(err)
	}
	r.Judge([]Threshold{mustThreshold(t, "acquire.p99<1s"), mustThreshold(t, "requests==1")})
	if err := r.Write(); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, HTMLFile))
	for _, banned := range []string{"http://", "https://", "//cdn", "<link"} {
		if strings.Contains(strings.ReplaceAll(string(page), "http://www.w3.org/2000/svg", ""), banned) {
			t.Errorf("report.html references %q: it must not fetch anything", banned)
		}
	}
	dom := dumpDOM(t, filepath.Join(dir, HTMLFile))
	got := charts(t, dom)
	for _, name := range []string{"throughput", "acquire", "outcomes", "nodes", "node-failed", "spectrum", "e2e"} {
		c, ok := got[name]
		if !ok {
			t.Errorf("chart %s missing from the DOM", name)
			continue
		}
		if c.rendered != "true" || c.points == 0 {
			t.Errorf("chart %s: rendered=%q with %d points, want rendered with points", name, c.rendered, c.points)
		}
	}
	paths := regexp.MustCompile(`<path d="M[0-9.]+,[0-9.]+L[^"]+"[^>]*class="series"`).FindAllString(dom, -1)
	if len(paths) < 10 {
		t.Errorf("found %d drawn series paths, want at least 10", len(paths))
	}
	if n := strings.Count(dom, `class="fault"`); n < 5 {
		t.Errorf("fault phase shaded on %d charts, want 5", n)
	}
	for _, want := range []string{"kill node1", "acquire.p99&lt;1s", "FAIL", "node1 SET 127.0.0.1:7001", "What the words mean", "abandoned", `id="late-card"`} {
		if !strings.Contains(dom, want) {
			t.Errorf("DOM lacks %q", want)
		}
	}
	if strings.Contains(dom, `data-rendered="error"`) {
		t.Error("a chart threw")
	}
}

func TestSweepReportRendersInChromium(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sweep")
	_, err := RunSweep(context.Background(), SweepSpec{
		Out: out, Rates: []float64{200, 400, 800}, SLO: []Threshold{mustThreshold(t, "requests<=100"), mustThreshold(t, "acquire.p99<10s")},
		KeepGoing: true,
		Step: func(ctx context.Context, rate float64, dir string) (*Report, error) {
			r, _ := executeRun(t, dir, runOpts{rate: rate, d: 250 * time.Millisecond, lock: true})
			return r, nil
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dom := dumpDOM(t, filepath.Join(out, HTMLFile))
	got := charts(t, dom)
	for _, name := range []string{"knee", "sweep-throughput"} {
		if c := got[name]; c.rendered != "true" || c.points < 3 {
			t.Errorf("chart %s: rendered=%q with %d points, want 3 steps drawn", name, c.rendered, c.points)
		}
	}
	for _, want := range []string{"knee 400/s", "SLO requests&lt;=100", "step-01-200/report.html", "missed", "reserved (/s)", "</i>reserved</span>", `class="verdict bad"`} {
		if !strings.Contains(dom, want) {
			t.Errorf("sweep DOM lacks %q", want)
		}
	}
}

// TestSafetyCard: the Safety card names each count the run checked, as the
// drill matrix does, and never sums them under one word.
func TestSafetyCard(t *testing.T) {
	for _, tc := range []struct {
		sf   Safety
		want string
		bad  bool
	}{
		{Safety{DoubleGrantsChecked: true, AuditChecked: true}, "safe", false},
		{Safety{DoubleGrantsChecked: true, AuditChecked: true, DoubleGrants: 8, LostUpdates: 45}, "8 double grants · 0 lock violations · 45 lost updates", true},
		{Safety{AuditChecked: true, LostUpdates: 3, Oversell: 1}, "3 lost updates · 1 oversold SKUs", true},
		{Safety{DoubleGrantsChecked: true, DoubleGrants: 2, LockViolations: 2}, "2 double grants · 2 lock violations", true},
	} {
		if got, bad := safetyCard(tc.sf); got != tc.want || bad != tc.bad {
			t.Errorf("safetyCard(%+v) = %q, %v; want %q, %v", tc.sf, got, bad, tc.want, tc.bad)
		}
	}
}

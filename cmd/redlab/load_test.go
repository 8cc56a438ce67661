package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/etcdtest"
	"github.com/redlocklab/redlocklab/loadgen"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// syncBuffer is a bytes.Buffer safe for the status line and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func runCmd(t *testing.T, signals <-chan os.Signal, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut syncBuffer
	code = run(context.Background(), &env{stdout: &out, stderr: &errOut, signals: signals}, args)
	return code, out.String(), errOut.String()
}

func readSummary(t *testing.T, dir string) loadgen.Summary {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, loadgen.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	var s loadgen.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLoadUsageErrors(t *testing.T) {
	t.Setenv("REDLAB_NODES", "")
	t.Setenv("REDLAB_ETCD", "")
	out := filepath.Join(t.TempDir(), "run")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no rate", []string{"--target", "noop", "--duration", "1s"}, "--rate and a positive --duration are required"},
		{"no duration", []string{"--target", "noop", "--rate", "10"}, "--rate and a positive --duration are required"},
		{"rate and stages", []string{"--target", "noop", "--rate", "10", "--duration", "1s", "--stages", "1s:10"}, "either --stages or --rate"},
		{"bad rate", []string{"--target", "noop", "--rate", "ten", "--duration", "1s"}, "rate \"ten\""},
		{"bad stages", []string{"--target", "noop", "--stages", "1s"}, "want DURATION:RATE"},
		{"bad keys", []string{"--target", "noop", "--rate", "10", "--duration", "1s", "--keys", "zipf:10:1"}, "singular"},
		{"bad quantity", []string{"--target", "noop", "--rate", "10", "--duration", "1s", "--quantity", "uniform:3:1"}, "quantity"},
		{"bad threshold", []string{"--target", "noop", "--rate", "10", "--duration", "1s", "--threshold", "acquire.p99<20"}, "give a unit"},
		{"node0 threshold", []string{"--target", "noop", "--rate", "10", "--duration", "1s", "--threshold", "node0.p99<5ms"}, "numbered from 1"},
		{"bad worker", []string{"--target", "noop", "--rate", "10", "--duration", "1s", "--worker", "3/3"}, "0 <= i < M"},
		{"bad target", []string{"--target", "ftp://x", "--rate", "10", "--duration", "1s"}, "want noop or http"},
		{"guard with target", []string{"--target", "noop", "--guard", "none", "--rate", "10", "--duration", "1s"}, "--guard applies"},
		{"lock without nodes", []string{"--guard", "redlock", "--rate", "10", "--duration", "1s"}, "--nodes is required"},
		{"etcd without endpoints", []string{"--guard", "etcd", "--rate", "10", "--duration", "1s"}, "--etcd is required"},
		{"etcd TTL below etcd's minimum", []string{"--guard", "etcd-fenced", "--etcd", "http://127.0.0.1:2379", "--lock-ttl", "500ms", "--rate", "10", "--duration", "1s"}, "minimum lease TTL of 2s"},
		{"bad guard", []string{"--guard", "mutex", "--rate", "10", "--duration", "1s"}, "unknown guard"},
		{"bad store", []string{"--guard", "none", "--store", "mysql://x", "--rate", "10", "--duration", "1s"}, ""},
		{"bad in-flight", []string{"--target", "noop", "--rate", "10", "--duration", "1s", "--max-in-flight", "0"}, "--max-in-flight"},
		{"extra args", []string{"--target", "noop", "--rate", "10", "--duration", "1s", "x"}, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCmd(t, nil, append(append([]string{"load"}, tc.args...), "--out", out)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d mentioning %q", code, stderr, exitUsage, tc.want)
			}
		})
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a usage error created the out directory")
	}
}

func TestLoadThresholdExitCodes(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := runCmd(t, nil, "load", "--target", "noop", "--rate", "200", "--duration", "500ms",
		"--keys", "hot:50:0.5", "--out", filepath.Join(dir, "pass"),
		"--threshold", "requests==100", "--threshold", "e2e.p999<=10s", "--threshold", "outcomes.error==0")
	if code != exitOK {
		t.Fatalf("passing thresholds: exit %d, stderr %s", code, stderr)
	}
	for _, want := range []string{"requests 100", "e2e (corrected)", "threshold requests==100: pass", "report: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = runCmd(t, nil, "load", "--target", "noop", "--rate", "200", "--duration", "500ms",
		"--out", filepath.Join(dir, "fail"), "--threshold", "requests>1000", "--threshold", "throughput>0")
	if code != exitThreshold {
		t.Fatalf("failing threshold: exit %d, want %d; stderr %s", code, exitThreshold, stderr)
	}
	if !strings.Contains(stderr, "threshold failed: requests>1000 (got 100)") || strings.Contains(stderr, "throughput>0 (") {
		t.Errorf("stderr should name only the failed threshold:\n%s", stderr)
	}
	s := readSummary(t, filepath.Join(dir, "fail"))
	if len(s.Thresholds) != 2 || s.Thresholds[0].Pass || !s.Thresholds[1].Pass {
		t.Errorf("summary.json thresholds = %+v", s.Thresholds)
	}
	// The same directory again is refused; report re-judges it.
	if code, _, _ := runCmd(t, nil, "load", "--target", "noop", "--rate", "10", "--duration", "100ms", "--out", filepath.Join(dir, "fail")); code != exitFailure {
		t.Errorf("reusing a run directory: exit %d, want %d", code, exitFailure)
	}
	if code, _, stderr := runCmd(t, nil, "report", filepath.Join(dir, "fail"), "--threshold", "requests==100"); code != exitOK {
		t.Errorf("report with a passing threshold: exit %d, stderr %s", code, stderr)
	}
	if code, _, _ := runCmd(t, nil, "report", filepath.Join(dir, "fail"), "--threshold", "requests==5"); code != exitThreshold {
		t.Errorf("report with a failing threshold: exit %d, want %d", code, exitThreshold)
	}
	// Without thresholds of its own, report judges those the run recorded.
	if code, _, stderr := runCmd(t, nil, "report", filepath.Join(dir, "fail")); code != exitThreshold || !strings.Contains(stderr, "requests>1000") {
		t.Errorf("report with the recorded thresholds: exit %d, stderr %s; want %d", code, stderr, exitThreshold)
	}
	if code, _, _ := runCmd(t, nil, "report", filepath.Join(dir, "nothing")); code != exitUsage {
		t.Errorf("report of a missing directory: exit %d, want %d", code, exitUsage)
	}
}

func TestLoadFirstSignalDrainsAndReports(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	sigs := make(chan os.Signal, 2)
	go func() {
		for {
			if _, err := os.Stat(filepath.Join(dir, loadgen.IntervalsFile)); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		sigs <- os.Interrupt
	}()
	code, stdout, stderr := runCmd(t, sigs, "load", "--target", "noop", "--rate", "100", "--duration", "1m", "--out", dir, "--interval", "100ms")
	if code != exitOK {
		t.Fatalf("exit %d after one interrupt, want 0; stderr %s", code, stderr)
	}
	if !strings.Contains(stderr, "interrupted: stopping the schedule") || !strings.Contains(stdout, "stopped early") {
		t.Errorf("stderr %q / stdout %q: want the drain message and a stopped run", stderr, stdout)
	}
	s := readSummary(t, dir)
	if !s.Stopped || s.Requests == 0 || s.Requests > 5000 {
		t.Errorf("summary: stopped %v with %d requests; want stopped early", s.Stopped, s.Requests)
	}
}

func TestLoadSecondSignalAborts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	sigs := make(chan os.Signal, 2)
	go func() {
		for {
			if _, err := os.Stat(filepath.Join(dir, loadgen.IntervalsFile)); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		sigs <- os.Interrupt
		sigs <- os.Interrupt
	}()
	code, _, stderr := runCmd(t, sigs, "load", "--target", "noop", "--rate", "100", "--duration", "1m", "--out", dir)
	if code != exitFailure || !strings.Contains(stderr, "interrupted twice") {
		t.Errorf("exit %d, stderr %q; want %d and the abort message", code, stderr, exitFailure)
	}
}

func TestSweepAndMergeCommands(t *testing.T) {
	dir := t.TempDir()
	sweepDir := filepath.Join(dir, "sweep")
	code, stdout, stderr := runCmd(t, nil, "sweep", "--target", "noop", "--rates", "100,300,900", "--step-duration", "500ms",
		"--slo", "requests<=100", "--max-late", "100", "--out", sweepDir) // lateness on a busy machine must not move the knee
	if code != exitOK {
		t.Fatalf("sweep: exit %d, stderr %s", code, stderr)
	}
	if !strings.Contains(stdout, "knee: 100/s") {
		t.Errorf("sweep stdout lacks the knee:\n%s", stdout)
	}
	if code, stdout, _ := runCmd(t, nil, "report", sweepDir); code != exitOK || !strings.Contains(stdout, "knee: 100/s") {
		t.Errorf("report of a sweep: exit %d\n%s", code, stdout)
	}
	if code, _, _ := runCmd(t, nil, "sweep", "--target", "noop", "--rates", "100", "--step-duration", "200ms", "--slo", "requests>1000", "--out", filepath.Join(dir, "sweep2")); code != exitThreshold {
		t.Errorf("sweep with no rate meeting the SLO: exit %d, want %d", code, exitThreshold)
	}
	if code, _, stderr := runCmd(t, nil, "sweep", "--target", "noop", "--rates", "200,100", "--slo", "requests>0"); code != exitUsage || !strings.Contains(stderr, "must rise") {
		t.Errorf("falling rates: exit %d, stderr %s", code, stderr)
	}

	var parts []string
	for i := 0; i < 2; i++ {
		p := filepath.Join(dir, "w"+string(rune('0'+i)))
		parts = append(parts, p)
		if code, _, stderr := runCmd(t, nil, "load", "--target", "noop", "--rate", "400", "--duration", "500ms", "--worker", string(rune('0'+i))+"/2", "--keys", "uniform:10", "--out", p); code != exitOK {
			t.Fatalf("worker %d: exit %d, stderr %s", i, code, stderr)
		}
	}
	merged := filepath.Join(dir, "merged")
	code, stdout, stderr = runCmd(t, nil, append(append([]string{"merge"}, parts...), "--out", merged, "--threshold", "requests==200")...)
	if code != exitOK {
		t.Fatalf("merge: exit %d, stderr %s\n%s", code, stderr, stdout)
	}
	if !strings.Contains(stdout, "merged from 2 runs") {
		t.Errorf("merge stdout:\n%s", stdout)
	}
	if code, _, _ := runCmd(t, nil, append(append([]string{"merge"}, parts...), "--out", filepath.Join(dir, "m2"), "--threshold", "requests==201")...); code != exitThreshold {
		t.Errorf("merge with a failing threshold: exit %d, want %d", code, exitThreshold)
	}
	if code, _, _ := runCmd(t, nil, "merge", "--out", filepath.Join(dir, "m3")); code != exitUsage {
		t.Errorf("merge without runs: exit %d, want %d", code, exitUsage)
	}
}

// TestLoadAgainstRealNodes is the end-to-end run: three real redis-server
// nodes, two in-process replicas behind the redlock guard, a short low-rate
// load with contention on a hot key.
func TestLoadAgainstRealNodes(t *testing.T) {
	c := redlocktest.Start(t, 3, redlocktest.Options{})
	dir := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := runCmd(t, nil, "load", "--nodes", strings.Join(c.Addrs(), ","), "--guard", "redlock",
		"--rate", "50", "--duration", "2s", "--keys", "hot:20:0.5", "--replicas", "2", "--stock", "1000",
		"--out", dir, "--progress",
		// A loaded CI machine answers slowly: generous timeouts keep the
		// test about safety and plumbing, not speed.
		"--node-timeout", "1s", "--acquire-timeout", "20s", "--lock-ttl", "30s",
		"--threshold", "safety.double_grants==0", "--threshold", "safety.lost_updates==0", "--threshold", "safety.oversell==0",
		"--threshold", "acquire.p50>0s", "--threshold", "outcomes.error==0", "--threshold", "requests==100",
		"--threshold", "node1.p50>0s")
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	s := readSummary(t, dir)
	if s.Outcomes["reserved"] == 0 || s.AcquireLatencyMs.Count == 0 || s.Attempts.Count == 0 {
		t.Errorf("summary %+v: want reservations with lock timings", s)
	}
	if len(s.PerNode) != 3 || s.PerNode[0].LatencyMs.Count == 0 || s.PerNode[0].Addr != c.Nodes[0].Addr ||
		s.PerNode[0].Node != 1 || s.PerNode[2].Node != 3 {
		t.Errorf("per_node = %+v, want three nodes, numbered 1 to 3, with SET latencies", s.PerNode)
	}
	if want := "node1 SET " + c.Nodes[0].Addr; !strings.Contains(stdout, want) || strings.Contains(stdout, "node0") {
		t.Errorf("text summary lacks %q (or names a node0):\n%s", want, stdout)
	}
	if !s.Safety.DoubleGrantsChecked || !s.Safety.AuditChecked {
		t.Errorf("safety = %+v, want both checks done", s.Safety)
	}
	if !strings.Contains(stderr, "rate") || !strings.Contains(stderr, "acquire p50") {
		t.Errorf("--progress printed no status line:\n%s", stderr)
	}
	if strings.Contains(stderr, "first error") {
		t.Errorf("healthy nodes: stderr reports a node error:\n%s", stderr)
	}
	for _, f := range []string{loadgen.HTMLFile, loadgen.HlogFile, "acquire.hgrm", "node1.hgrm", "node3.hgrm", "inventory.db"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

// TestLoadNothingReserved runs a load against lock nodes that refuse every
// connection: the run must say once per node what its first error was, and
// end with exit 1 and the reason, not exit 0 with a report of nothing.
func TestLoadNothingReserved(t *testing.T) {
	addrs := []string{
		fmt.Sprintf("127.0.0.1:%d", redlocktest.FreePort(t)),
		fmt.Sprintf("127.0.0.1:%d", redlocktest.FreePort(t)),
	}
	code, stdout, stderr := runCmd(t, nil, "load", "--nodes", strings.Join(addrs, ","), "--guard", "redlock",
		"--rate", "10", "--duration", "2s", "--out", filepath.Join(t.TempDir(), "run"))
	if code != exitFailure {
		t.Fatalf("got exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitFailure, stdout, stderr)
	}
	if want := "redlab load: nothing reserved: 0 of 20 requests"; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	for i, a := range addrs {
		want := fmt.Sprintf("node%d %s: first error: ", i+1, a)
		if got := strings.Count(stderr, want); got != 1 {
			t.Errorf("stderr names node %d's first error %d times, want once (%q):\n%s", i+1, got, want, stderr)
		}
	}
	// The report is still written: the summary says what happened.
	if !strings.Contains(stdout, "requests 20") {
		t.Errorf("stdout lacks the summary:\n%s", stdout)
	}
}

func TestLoadFlagValues(t *testing.T) {
	for _, tc := range []struct {
		v interface {
			Set(string) error
			String() string
		}
		in   string
		want string
		ok   bool
	}{
		{new(rateFlag), "500", "500", true},
		{new(rateFlag), "50/100ms", "500", true},
		{new(rateFlag), "x", "", false},
		{new(stagesFlag), "30s:500,1m:2000,30s:0", "30s:500,1m0s:2000,30s:0", true},
		{new(stagesFlag), "30s", "", false},
		{new(keysFlag), "zipf:1000:0.99", "zipf:1000:0.99", true},
		{new(keysFlag), "hot:100:0.9", "hot:100:0.9", true},
		{new(keysFlag), "zipf:10", "", false},
		{new(quantityFlag), "uniform:1:3", "uniform:1:3", true},
		{new(quantityFlag), "0", "", false},
		{new(workerFlag), "1/3", "1/3", true},
		{new(workerFlag), "3/3", "", false},
		{new(targetFlag), "noop", "noop", true},
		{new(targetFlag), "http://a:8080, https://b", "http://a:8080,https://b", true},
		{new(targetFlag), "a:8080", "", false},
		{new(ratesFlag), "500,1000,2000", "500,1000,2000", true},
		{new(ratesFlag), "500,500", "", false},
	} {
		err := tc.v.Set(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("%T.Set(%q) error = %v, want ok=%v", tc.v, tc.in, err, tc.ok)
			continue
		}
		if tc.ok && tc.v.String() != tc.want {
			t.Errorf("%T.Set(%q): String() = %q, want %q", tc.v, tc.in, tc.v.String(), tc.want)
		}
	}
	var ths thresholdsFlag
	for _, s := range []string{"acquire.p99<20ms", "safety.lost_updates==0"} {
		if err := ths.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	if ths.String() != "acquire.p99<20ms safety.lost_updates==0" || ths.Set("nonsense") == nil {
		t.Errorf("repeatable --threshold: got %q", ths.String())
	}
}

func TestLoadLabCPUWithoutLab(t *testing.T) {
	t.Setenv(envStateDir, filepath.Join(t.TempDir(), "nolab"))
	out := filepath.Join(t.TempDir(), "run")
	code, _, stderr := runCmd(t, nil, "load", "--target", "noop", "--rate", "10", "--duration", "1s", "--lab-cpu", "--out", out)
	if code != exitFailure || !strings.Contains(stderr, "--lab-cpu") {
		t.Errorf("load --lab-cpu with no lab: exit %d, stderr %q; want %d naming --lab-cpu", code, stderr, exitFailure)
	}
	if _, err := os.Stat(filepath.Join(out, loadgen.MetaFile)); err == nil {
		t.Error("load --lab-cpu with no lab ran anyway")
	}
}

// TestLoadRunsRedsyncAndComparisonGuards: `redlab load` runs the redsync
// guard and the comparison guard redlock-del (which `serve` refuses), and
// both conserve stock when nothing fails.
// TestLoadEtcd: `redlab load --guard etcd|etcd-fenced --etcd …` runs
// in-process replicas locking on a real etcd cluster, checks their holds
// and audits the store.
func TestLoadEtcd(t *testing.T) {
	t.Setenv("REDLAB_ETCD", "")
	c := etcdtest.Start(t, 1, etcdtest.Options{})
	for _, g := range []string{"etcd", "etcd-fenced"} {
		t.Run(g, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			code, stdout, stderr := runCmd(t, nil, "load", "--etcd", strings.Join(c.Endpoints(), ","), "--guard", g,
				"--rate", "40", "--duration", "1s", "--keys", "hot:8:0.5", "--replicas", "2", "--stock", "1000",
				"--out", dir, "--acquire-timeout", "20s",
				"--threshold", "safety.double_grants==0", "--threshold", "safety.lost_updates==0",
				"--threshold", "safety.fenced_rejections==0", "--threshold", "outcomes.error==0", "--threshold", "requests==40")
			if code != exitOK {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			s := readSummary(t, dir)
			if s.Outcomes["reserved"] != 40 || s.AcquireLatencyMs.Count != 40 || !s.Safety.DoubleGrantsChecked || !s.Safety.AuditChecked {
				t.Errorf("summary %+v: want 40 reservations with lock timings, holds and store checked", s)
			}
			t.Logf("%s: acquire p50 %.2fms p99 %.2fms", g, s.AcquireLatencyMs.P50, s.AcquireLatencyMs.P99)
		})
	}
}

func TestLoadRunsRedsyncAndComparisonGuards(t *testing.T) {
	c := redlocktest.Start(t, 3, redlocktest.Options{})
	for _, g := range []string{"redsync", "redlock-del"} {
		t.Run(g, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			args := []string{"load", "--nodes", strings.Join(c.Addrs(), ","), "--guard", g,
				"--rate", "20", "--duration", "1s", "--keys", "uniform:4", "--replicas", "2", "--stock", "1000",
				"--out", dir, "--acquire-timeout", "20s", "--lock-ttl", "30s",
				"--threshold", "safety.double_grants==0", "--threshold", "safety.lost_updates==0",
				"--threshold", "outcomes.error==0", "--threshold", "requests==20"}
			if g == "redlock-del" {
				args = append(args, "--node-timeout", "1s")
			}
			code, stdout, stderr := runCmd(t, nil, args...)
			if code != exitOK {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			s := readSummary(t, dir)
			if s.Outcomes["reserved"] == 0 || s.AcquireLatencyMs.Count == 0 {
				t.Errorf("summary %+v: want reservations with lock timings", s)
			}
		})
	}
}

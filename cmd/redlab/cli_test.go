package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/redlocklab/redlocklab/loadgen"
	"github.com/redlocklab/redlocklab/redlock"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// runArgs runs one command line in-process.
func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), &env{stdout: &out, stderr: &errOut}, args)
	return code, out.String(), errOut.String()
}

// commandPaths lists the path of every visible command of the tree, the
// root ("") included, as the words a user types.
func commandPaths(t *testing.T) [][]string {
	t.Helper()
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			if !sub.Hidden {
				walk(sub, append(slices.Clone(path), sub.Name()))
			}
		}
	}
	walk(newRoot(&env{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}), nil)
	return paths
}

// TestCommandTree guards the walk below: a tree it cannot see would make
// every check over it pass.
func TestCommandTree(t *testing.T) {
	var got []string
	for _, p := range commandPaths(t) {
		got = append(got, strings.Join(p, " "))
	}
	for _, want := range []string{
		"", "lab", "lab up", "lab status", "lab down", "node", "node start", "node run", "node stop",
		"fault", "fault kill", "fault restart", "fault stop", "fault start", "fault pause", "fault partition",
		"fault heal", "fault latency", "fault clock-jump", "fault clock-rate", "fault list",
		"serve", "load", "sweep", "report", "merge", "doctor", "version", "help", "completion", "completion bash",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("command %q is missing from the tree %q", want, got)
		}
	}
}

// TestEveryCommandFlagsAndHelp: on every command, an unknown flag is a usage
// error that names the flag on stderr and prints nothing on stdout; --help,
// -h and `help CMD` print the same help on stdout, exit 0, nothing on
// stderr, and no default a user cannot type back (like -1ns).
func TestEveryCommandFlagsAndHelp(t *testing.T) {
	negativeDefault := regexp.MustCompile(`\(default -\d`)
	for _, path := range commandPaths(t) {
		name := strings.Join(append([]string{"redlab"}, path...), " ")
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runArgs(t, append(slices.Clone(path), "--no-such-flag")...)
			if code != exitUsage {
				t.Errorf("unknown flag: got exit %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr, "--no-such-flag") || !strings.Contains(stderr, "see '"+name+" --help'") {
				t.Errorf("unknown flag: got stderr %q, want the flag named and the hint %q", stderr, "see '"+name+" --help'")
			}
			if stdout != "" {
				t.Errorf("unknown flag: got stdout %q, want nothing", stdout)
			}

			var help string
			for _, flag := range []string{"--help", "-h"} {
				code, stdout, stderr := runArgs(t, append(slices.Clone(path), flag)...)
				if code != exitOK || stderr != "" {
					t.Errorf("%s: got exit %d, stderr %q; want exit 0 and nothing on stderr", flag, code, stderr)
				}
				if !strings.Contains(stdout, "Usage:") || !strings.Contains(stdout, name) {
					t.Errorf("%s: got stdout %q, want the usage of %s", flag, stdout, name)
				}
				if m := negativeDefault.FindString(stdout); m != "" {
					t.Errorf("%s: help shows %q, a default no user can mean:\n%s", flag, m, stdout)
				}
				help = stdout
			}
			code, stdout, stderr = runArgs(t, append([]string{"help"}, path...)...)
			if code != exitOK || stderr != "" || stdout != help {
				t.Errorf("help %s: got exit %d, stderr %q, stdout %q; want exit 0 and the --help text", strings.Join(path, " "), code, stderr, stdout)
			}
		})
	}
}

// TestEveryCommandRefusesStrayArguments: a positional argument no command
// takes is a usage error naming it.
func TestEveryCommandRefusesStrayArguments(t *testing.T) {
	t.Setenv(envNodes, "")
	t.Setenv(envStateDir, filepath.Join(t.TempDir(), "nolab"))
	for _, path := range commandPaths(t) {
		name := strings.Join(append([]string{"redlab"}, path...), " ")
		switch name {
		case "redlab merge", "redlab hosts check":
			continue // take run directories, an inventory file; TestArgumentCounts and TestHosts* cover them
		}
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := runArgs(t, append(slices.Clone(path), "stray-argument")...)
			if code != exitUsage || !strings.Contains(stderr, "stray-argument") || stdout != "" {
				t.Errorf("got exit %d, stdout %q, stderr %q; want exit %d naming the argument on stderr", code, stdout, stderr, exitUsage)
			}
		})
	}
}

func TestArgumentCounts(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(envStateDir, filepath.Join(dir, "nolab"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing command"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"lab"}, "missing command: one of down, list, status, up"},
		{[]string{"lab", "upp"}, `did you mean up?`},
		{[]string{"help", "lab", "bogus"}, `unknown command "lab bogus"`},
		{[]string{"fault", "kill"}, "takes exactly one node number, got 0"},
		{[]string{"fault", "kill", "1", "2"}, "takes exactly one node number, got 2"},
		{[]string{"fault", "partition"}, "needs at least one node number"},
		{[]string{"fault", "kill", "0"}, `node "0": want a node number from 1`},
		{[]string{"report"}, "want exactly one run directory, got 0"},
		{[]string{"report", dir, dir}, "want exactly one run directory, got 2"},
		{[]string{"merge", "--out", filepath.Join(dir, "m")}, "want one or more run directories"},
		{[]string{"merge", dir}, "--out is required"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runArgs(t, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "--help'") || stdout != "" {
				t.Errorf("got exit %d, stdout %q, stderr %q; want exit %d with %q and the hint on stderr", code, stdout, stderr, exitUsage, tc.want)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	code, stdout, stderr := runArgs(t, "version")
	if code != exitOK || stderr != "" {
		t.Fatalf("got exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
	if !strings.HasPrefix(stdout, "redlab ") || !strings.Contains(stdout, ", commit ") || !strings.Contains(stdout, runtime.Version()) {
		t.Errorf("got %q, want redlab's version, commit and %s", stdout, runtime.Version())
	}
	if _, flagOut, _ := runArgs(t, "--version"); flagOut != stdout {
		t.Errorf("--version: got %q, want %q as from `redlab version`", flagOut, stdout)
	}

	goVer := runtime.Version()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "redlab devel, commit unknown, " + goVer + " " + platform},
		{"go build outside a repository", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"}},
			"redlab devel, commit unknown, go1.99.1 " + platform},
		{"go build in a clean checkout", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "7815cace"}, {Key: "vcs.modified", Value: "false"}}},
			"redlab devel, commit 7815cace, go1.99.1 " + platform},
		{"go build with local changes", &debug.BuildInfo{GoVersion: "go1.99.1",
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "7815cace"}, {Key: "vcs.modified", Value: "true"}}},
			"redlab devel, commit 7815cace (modified), go1.99.1 " + platform},
		{"go install at a version", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v1.2.3"}},
			"redlab v1.2.3, commit unknown, go1.99.1 " + platform},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionOf(tc.bi).String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestThresholdsAgainstNodeCount: a per-node threshold naming a node the run
// does not time is a usage error before anything starts.
func TestThresholdsAgainstNodeCount(t *testing.T) {
	t.Setenv(envNodes, "")
	five := "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4,127.0.0.1:5" // never dialled: validation comes first
	out := filepath.Join(t.TempDir(), "run")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"node9 of five", []string{"load", "--nodes", five, "--rate", "10", "--duration", "1s", "--threshold", "node9.p99<5ms"},
			`--threshold "node9.p99<5ms": there is no node9; the run times 5 lock nodes, node1 to node5`},
		{"node6 of five in a sweep", []string{"sweep", "--nodes", five, "--rates", "10", "--slo", "node6.max<1s"},
			`--slo "node6.max<1s": there is no node6`},
		{"node1 without a lock", []string{"load", "--target", "noop", "--rate", "10", "--duration", "1s", "--threshold", "node1.p99<5ms"},
			"--target noop takes no lock"},
		{"node1 with a guard that times no node", []string{"load", "--nodes", five, "--guard", "redis-single", "--rate", "10", "--duration", "1s", "--threshold", "node1.p99<5ms"},
			"guard redis-single has no per-node latency"},
		{"node1 through remote instances", []string{"load", "--target", "http://127.0.0.1:1", "--rate", "10", "--duration", "1s", "--threshold", "node1.p50<1s"},
			"the --target instances take the locks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runArgs(t, append(tc.args, "--out", out)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("got exit %d, stderr %q; want %d with %q", code, stderr, exitUsage, tc.want)
			}
		})
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a usage error created the out directory")
	}

	// report judges a recorded run: a noop run has no per-node latency.
	dir := filepath.Join(t.TempDir(), "noop")
	if code, _, stderr := runArgs(t, "load", "--target", "noop", "--rate", "100", "--duration", "200ms", "--out", dir); code != exitOK {
		t.Fatalf("noop run: exit %d, stderr %s", code, stderr)
	}
	if code, _, stderr := runArgs(t, "report", dir, "--threshold", "node1.p99<5ms"); code != exitUsage || !strings.Contains(stderr, "no per-node latency") {
		t.Errorf("report with node1 on a noop run: got exit %d, stderr %q; want %d", code, stderr, exitUsage)
	}
}

func TestThresholdsCheckNodes(t *testing.T) {
	for _, tc := range []struct {
		exprs  []string
		nodes  int
		wantOK bool
	}{
		{[]string{"node5.p99<5ms"}, 5, true},
		{[]string{"node1.p99<5ms", "node6.p99<5ms"}, 5, false},
		{[]string{"acquire.p99<5ms", "safety.lost_updates==0"}, 0, true},
		{[]string{"node1.max<1s"}, 0, false},
		{[]string{"node10.p50<1ms"}, 10, true},
		{[]string{"node11.p50<1ms"}, 10, false},
	} {
		var ths thresholdsFlag
		for _, e := range tc.exprs {
			if err := ths.Set(e); err != nil {
				t.Fatal(err)
			}
		}
		err := ths.checkNodes("--threshold", tc.nodes, "no lock")
		if (err == nil) != tc.wantOK {
			t.Errorf("%q against %d nodes: got error %v, want ok=%v", tc.exprs, tc.nodes, err, tc.wantOK)
		}
	}
}

func TestLatencyInWholeMilliseconds(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nolab")
	for _, tc := range []struct {
		args []string
		want int
		msg  string
	}{
		{[]string{"--add", "500us"}, exitUsage, `--add: want a whole number of 1ms, got 500µs (use 0s or 1ms)`},
		{[]string{"--add", "1500us"}, exitUsage, "use 1ms or 2ms"},
		{[]string{"--add", "20ms", "--jitter", "0.5ms"}, exitUsage, `--jitter: want a whole number of 1ms, got 500µs`},
		{[]string{"--add", "-1ms"}, exitUsage, "--add: want a duration of at least 0s, got -1ms"},
		{[]string{"--jitter", "5ms"}, exitUsage, "--add: latency needs add (like 200ms)"},
		{[]string{"--add", "soon"}, exitUsage, `invalid argument "soon" for "--add" flag: want a duration like 200ms, got "soon"`},
		// Valid flags get as far as the missing lab.
		{[]string{"--add", "20ms", "--jitter", "5ms"}, exitFailure, "no lab"},
		{[]string{"--add", "0"}, exitFailure, "no lab"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := runArgs(t, append([]string{"fault", "latency", "1", "--state-dir", missing}, tc.args...)...)
			if code != tc.want || !strings.Contains(stderr, tc.msg) {
				t.Errorf("got exit %d, stderr %q; want %d with %q", code, stderr, tc.want, tc.msg)
			}
		})
	}
}

// deadAddrs returns n distinct loopback addresses nothing listens on (a
// moment ago): the listeners are all open at once, so no port repeats.
func deadAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}

// TestDoctorSummaryWithDeadNodes: one live node and two dead ones are three
// nodes, two of them unreachable; the findings are counted apart from the
// nodes; go-redis' pool logs stay off stderr.
func TestDoctorSummaryWithDeadNodes(t *testing.T) {
	live := redlocktest.Start(t, 1, redlocktest.Options{})
	addrs := append([]string{live.Nodes[0].Addr}, deadAddrs(t, 2)...)
	nodes := strings.Join(addrs, ",")

	code, stdout, stderr := runArgs(t, "doctor", "--nodes", nodes, "--timeout", "250ms")
	if code != exitFailure {
		t.Fatalf("got exit %d, want %d\n%s%s", code, exitFailure, stdout, stderr)
	}
	// The set's nodes and timeouts checks, nine checks of the live node,
	// one "reachable" per dead node.
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if got, want := lines[len(lines)-1], "3 nodes (2 unreachable); 13 findings: 2 critical, 0 warnings, 11 ok"; got != want {
		t.Errorf("summary: got %q, want %q", got, want)
	}
	if want := "only 1 of 3 nodes answer and the quorum is 2, so every acquire fails."; strings.Count(stdout, want) != 2 {
		t.Errorf("want the fix %q on both dead nodes:\n%s", want, stdout)
	}
	if got, want := stderr, "redlab doctor: 2 critical findings: see the FIX column\n"; got != want {
		t.Errorf("stderr: got %q, want only %q", got, want)
	}

	code, stdout, stderr = runArgs(t, "doctor", "--nodes", nodes, "--timeout", "250ms", "--json")
	if code != exitFailure {
		t.Fatalf("--json: got exit %d, want %d\n%s", code, exitFailure, stderr)
	}
	var rep struct {
		Nodes []struct {
			Node      int    `json:"node"`
			Addr      string `json:"addr"`
			Reachable bool   `json:"reachable"`
			Error     string `json:"error"`
			Role      string `json:"role"`
		} `json:"nodes"`
		Findings []redlock.Finding `json:"findings"`
		Summary  redlock.Summary   `json:"summary"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, stdout)
	}
	if want := (redlock.Summary{Nodes: 3, Unreachable: 2, Critical: 2, Warning: 0, OK: 11}); rep.Summary != want {
		t.Errorf("summary: got %+v, want %+v", rep.Summary, want)
	}
	if len(rep.Nodes) != 3 || !rep.Nodes[0].Reachable || rep.Nodes[0].Role != "master" || rep.Nodes[1].Reachable ||
		rep.Nodes[1].Error == "" || rep.Nodes[2].Addr != addrs[2] || rep.Nodes[2].Node != 2 {
		t.Errorf("nodes: got %+v, want node 0 a reachable master, nodes 1 and 2 unreachable with their error", rep.Nodes)
	}
	var critical []int
	for _, f := range rep.Findings {
		if f.Severity == redlock.Critical {
			critical = append(critical, f.Node)
			if f.Check != "reachable" || !strings.HasPrefix(f.Fix, "Start the node") {
				t.Errorf("critical finding %+v: want an unreachable node with its fix", f)
			}
		}
	}
	if len(rep.Findings) != 13 || !slices.Equal(critical, []int{1, 2}) {
		t.Errorf("got %d findings, critical on nodes %v; want 13, critical on 1 and 2", len(rep.Findings), critical)
	}
}

// TestLoadRecordsItsCommandLine: run.json keeps the command line as typed.
func TestLoadRecordsItsCommandLine(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	args := []string{"load", "--target", "noop", "--rate", "100", "--duration", "200ms", "--out", dir}
	if code, _, stderr := runArgs(t, args...); code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	r, err := loadgen.LoadReport(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Meta.Command, strings.Join(args, " "); got != want {
		t.Errorf("run.json command: got %q, want %q", got, want)
	}
}

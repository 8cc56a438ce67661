package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

func runLabArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), &env{stdout: &out, stderr: &errOut}, args)
	return code, out.String(), errOut.String()
}

// TestLabFaultNodeUsage checks that bad invocations are usage errors caught
// before any side effect, and that commands on a lab that is not there
// behave.
func TestLabFaultNodeUsage(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nolab")
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"lab"}, exitUsage},
		{[]string{"lab", "bogus"}, exitUsage},
		{[]string{"lab", "up", "--count", "0", "--state-dir", missing}, exitUsage},
		{[]string{"lab", "up", "--count", "100", "--state-dir", missing}, exitUsage},
		{[]string{"lab", "up", "--persistence", "sometimes", "--state-dir", missing}, exitUsage},
		{[]string{"lab", "up", "--restart-delay", "-1s", "--state-dir", missing}, exitUsage},
		{[]string{"lab", "up", "--persistence", "always,everysec", "--state-dir", missing}, exitUsage},
		{[]string{"lab", "up", "--persistence", "always,sometimes,always,always,always", "--state-dir", missing}, exitUsage},
		{[]string{"lab", "up", "extra", "--state-dir", missing}, exitUsage},
		{[]string{"lab", "up", "--replicas", "2", "--state-dir", missing}, exitUsage},
		{[]string{"lab", "up", "--ssh", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "failover", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "failover", "1", "--lag", "-1s", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "failover", "1", "--state-dir", missing}, exitFailure},
		{[]string{"lab", "status", "--state-dir", missing}, exitFailure},
		{[]string{"lab", "down", "--state-dir", missing}, exitOK},
		{[]string{"fault"}, exitUsage},
		{[]string{"fault", "explode", "1"}, exitUsage},
		{[]string{"fault", "kill", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "kill", "1", "2", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "kill", "x", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "kill", "0", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "restart", "1", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "pause", "1", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "latency", "1", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "latency", "1", "--add", "10ms", "--jitter", "-1ms", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "clock-jump", "1", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "clock-rate", "1", "--for", "1s", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "clock-rate", "1", "--factor", "2", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "partition", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "list", "1", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "kill", "1", "--state-dir", missing}, exitFailure},
		{[]string{"fault", "power-loss", "--state-dir", missing}, exitUsage},
		{[]string{"fault", "power-loss", "1", "--state-dir", missing}, exitFailure},
		{[]string{"fault", "heal", "--state-dir", missing}, exitFailure},
		{[]string{"node"}, exitUsage},
		{[]string{"node", "start"}, exitUsage},
		{[]string{"node", "start", "--id", "1"}, exitUsage},
		{[]string{"node", "run", "--id", "0", "--state-dir", missing}, exitUsage},
		{[]string{"node", "start", "--id", "1", "--state-dir", missing, "--conf-b64", "!!", "--guard-b64", "IyE="}, exitUsage},
		{[]string{"node", "start", "--id", "1", "--state-dir", missing, "--port", "7101", "--redis-port", "7201", "--conf-b64", "cG9ydCA3MjAy", "--guard-b64", "IyE="}, exitUsage},
		{[]string{"node", "stop", "--id", "1"}, exitUsage},
		{[]string{"node", "stop", "--id", "1", "--state-dir", missing}, exitOK},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, stderr := runLabArgs(t, tt.args...)
			if code != tt.want {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.want, stderr)
			}
			if _, err := os.Stat(missing); err == nil {
				t.Fatalf("%s was created by a failing command", missing)
			}
		})
	}
}

// TestLabCLI drives a real lab through the redlab binary, as a user would.
func TestLabCLI(t *testing.T) {
	bin, _ := testenv.RequireLab(t, lab.FindTerraform)
	infra := filepath.Join(testenv.RepoRoot(t), "infra")
	dir := filepath.Join(t.TempDir(), "state")
	base := redistest.FreeStableBasePort(t, 3, lab.PortOffsets(0)...)
	redlab := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--state-dir", dir)...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	t.Cleanup(func() { redlab("lab", "down") })

	code, out := redlab("lab", "up", "--count", "3", "--base-port", fmt.Sprint(base), "--restart-delay", "1s", "--infra-dir", infra)
	if code != exitOK {
		t.Fatalf("lab up: exit %d\n%s", code, out)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	addrs := []string{}
	for i := 1; i <= 3; i++ {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", base+i))
	}
	exports := lines[len(lines)-1]
	if got, want := exports, "export REDLAB_NODES="+strings.Join(addrs, ",")+" REDLAB_STATE_DIR="+dir+" REDLAB_CREDENTIALS="+filepath.Join(dir, "credentials.json"); got != want {
		t.Errorf("last line of lab up: got %q, want %q", got, want)
	}
	checkExports(t, bin, exports, strings.Join(addrs, ","), dir)

	steps := []struct {
		args    []string
		want    int
		wantOut []string
	}{
		{[]string{"lab", "up"}, exitOK, []string{"3 nodes", "export REDLAB_NODES=" + strings.Join(addrs, ",")}},
		{[]string{"fault", "partition", "2"}, exitOK, []string{"partition: nodes [2]"}},
		{[]string{"lab", "status"}, exitOK, []string{"partitioned", "always", "kill -9 keeps page-cache writes: always vs everysec indistinguishable; 'none' models key loss"}},
		{[]string{"fault", "heal"}, exitOK, []string{"heal: all nodes"}},
		{[]string{"fault", "latency", "3", "--add", "20ms", "--jitter", "5ms"}, exitOK, []string{"latency node 3"}},
		{[]string{"fault", "clock-jump", "1", "--by", "5s"}, exitOK, []string{"clock-jump node 1: 0 keys' TTLs moved, 0 keys expired"}},
		{[]string{"fault", "kill", "1"}, exitOK, []string{"kill node 1: now waiting"}},
		// The default lab writes to plain directories: a power loss is
		// refused, naming the flag that brings the filesystem model.
		{[]string{"fault", "power-loss", "3"}, exitUsage, []string{"lab up --power-loss"}},
		{[]string{"lab", "up", "--power-loss"}, exitOK, []string{"the power-loss filesystem under every data directory"}},
		{[]string{"fault", "power-loss", "3"}, exitOK, []string{"power-loss node 3 (always, filesystem model): cut 0 unsynced bytes, 0 acknowledged writes"}},
		{[]string{"fault", "restart", "1", "--delay", "0s"}, exitOK, []string{"restart node 1"}},
		{[]string{"fault", "stop", "2"}, exitOK, []string{"stop node 2: now stopped"}},
		{[]string{"fault", "pause", "2", "--for", "1s"}, exitFailure, []string{"not running"}},
		{[]string{"fault", "start", "2"}, exitOK, []string{"start node 2: now up"}},
		{[]string{"fault", "clock-rate", "3", "--factor", "2", "--for", "200ms"}, exitOK, []string{"clock-rate node 3"}},
		{[]string{"fault", "kill", "9"}, exitUsage, []string{"no node 9"}},
		{[]string{"fault", "failover", "1"}, exitUsage, []string{"the lab needs replicas"}},
		{[]string{"fault", "list"}, exitOK, []string{"partition", "kill", "restart", "stop", "clock-jump", "latency"}},
		{[]string{"lab", "down"}, exitOK, []string{"is clear"}},
		{[]string{"lab", "down"}, exitOK, nil},
		{[]string{"lab", "status"}, exitFailure, []string{"no lab"}},
	}
	for _, s := range steps {
		code, out := redlab(s.args...)
		if code != s.want {
			t.Errorf("redlab %s: exit %d, want %d\n%s", strings.Join(s.args, " "), code, s.want, out)
			continue
		}
		for _, w := range s.wantOut {
			if !strings.Contains(out, w) {
				t.Errorf("redlab %s: output lacks %q:\n%s", strings.Join(s.args, " "), w, out)
			}
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s still exists after lab down", dir)
	}
}

// checkExports evals the last line of `lab up` in bash, as the README says
// (eval "$(redlab lab up | tail -1)"), and checks that the variables reach
// a child process and that the commands then need no --nodes or
// --state-dir.
func checkExports(t *testing.T, bin, line, nodes, dir string) {
	t.Helper()
	testenv.Require(t, "bash")
	// Neither the test's environment nor its working directory (no ./.redlab
	// here) may stand in for what the line exports.
	t.Setenv(envNodes, "")
	t.Setenv(envStateDir, "")
	shell := func(script string, args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command("bash", append([]string{"-c", `eval "$1" && shift && ` + script, "bash", line}, args...)...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	code, out := shell(`exec env`)
	if code != 0 || !strings.Contains(out, "\n"+envNodes+"="+nodes+"\n") || !strings.Contains(out, "\n"+envStateDir+"="+dir+"\n") {
		t.Errorf("after eval, a child's environment: exit %d, want %s=%s and %s=%s in:\n%s", code, envNodes, nodes, envStateDir, dir, out)
	}
	runDir := filepath.Join(t.TempDir(), "run")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"doctor", "--timeout", "250ms"}, "3 nodes; "},
		{[]string{"load", "--rate", "20", "--duration", "500ms", "--node-timeout", "1s", "--acquire-timeout", "20s",
			"--out", runDir, "--threshold", "node3.p50>0s", "--threshold", "outcomes.error==0"}, "threshold node3.p50>0s: pass"},
		{[]string{"fault", "list"}, "NODE"},
		{[]string{"lab", "status", "--json"}, `"state_dir": "` + dir + `"`},
	} {
		code, out := shell(`exec "$@"`, append([]string{bin}, tc.args...)...)
		if code != exitOK || !strings.Contains(out, tc.want) {
			t.Errorf("after eval, redlab %s: exit %d, want 0 and %q in:\n%s", strings.Join(tc.args, " "), code, tc.want, out)
		}
	}
	code, out = shell(`exec "$1" lab status --json 2>/dev/null`, bin)
	var st labStatusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 {
		t.Fatalf("lab status --json: exit %d, %v:\n%s", code, err, out)
	}
	if strings.Join(st.Addrs, ",") != nodes || len(st.Nodes) != 3 || st.Nodes[2].ID != 3 || st.Nodes[0].State == "" {
		t.Errorf("lab status --json: got %+v, want the three nodes of %s", st, nodes)
	}
}

// TestLabReplicasCLI: `lab up --replicas 1` gives every node a replica,
// `redlab doctor` against it exits 1 naming the replica problem on every
// node, and `fault failover` promotes a replica behind the node's address.
func TestLabReplicasCLI(t *testing.T) {
	bin, _ := testenv.RequireLab(t, lab.FindTerraform)
	infra := filepath.Join(testenv.RepoRoot(t), "infra")
	dir := filepath.Join(t.TempDir(), "state")
	base := redistest.FreeStableBasePort(t, 3, lab.PortOffsets(1)...)
	redlab := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), envStateDir+"="+dir)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	t.Cleanup(func() { redlab("lab", "down") })
	code, out := redlab("lab", "up", "--count", "3", "--replicas", "1", "--base-port", fmt.Sprint(base), "--restart-delay", "1s", "--infra-dir", infra)
	if code != exitOK || !strings.Contains(out, "one asynchronous replica per node") || !strings.Contains(out, fmt.Sprintf("replica 127.0.0.1:%d", base+301)) {
		t.Fatalf("lab up --replicas 1: exit %d\n%s", code, out)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	exports := lines[len(lines)-1]

	// doctor as the README says: eval the export line, then doctor.
	cmd := exec.Command("bash", "-c", `eval "$1" && exec "$2" doctor --timeout 250ms`, "bash", exports, bin)
	cmd.Env = append(os.Environ(), envNodes+"=", envStateDir+"=")
	dout, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != exitFailure {
		t.Fatalf("doctor against a replicated lab: %v, want exit %d\n%s", err, exitFailure, dout)
	}
	for i := 1; i <= 3; i++ {
		line := ""
		for _, l := range strings.Split(string(dout), "\n") {
			if strings.HasPrefix(l, fmt.Sprintf("%d 127.0.0.1:%d", i, base+i)) && strings.Contains(l, "replicas") {
				line = l
			}
		}
		if !strings.Contains(line, "critical") || !strings.Contains(line, "1 connected replica") || !strings.Contains(line, "not an independent node") {
			t.Errorf("doctor, node %d: replicas line %q, want it critical, naming the connected replica and why it is not an independent node\n%s", i, line, dout)
		}
	}

	for _, s := range []struct {
		args    []string
		want    int
		wantOut []string
	}{
		{[]string{"lab", "status"}, exitOK, []string{"REPLICA", "replica up, synced"}},
		{[]string{"fault", "failover", "2", "--lag", "300ms"}, exitOK, []string{fmt.Sprintf("failover node 2: 127.0.0.1:%d promoted behind 127.0.0.1:%d after holding replication back 300ms", base+302, base+2)}},
		{[]string{"lab", "status"}, exitOK, []string{"promoted: the replica is the master"}},
		{[]string{"fault", "failover", "2", "--lag", "-1s"}, exitUsage, []string{"--lag"}},
		{[]string{"fault", "list"}, exitOK, []string{"failover"}},
		{[]string{"lab", "down"}, exitOK, []string{"is clear"}},
	} {
		code, out := redlab(s.args...)
		if code != s.want {
			t.Errorf("redlab %s: exit %d, want %d\n%s", strings.Join(s.args, " "), code, s.want, out)
			continue
		}
		for _, w := range s.wantOut {
			if !strings.Contains(out, w) {
				t.Errorf("redlab %s: output lacks %q:\n%s", strings.Join(s.args, " "), w, out)
			}
		}
	}
}

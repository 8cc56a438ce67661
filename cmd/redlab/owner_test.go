package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/redlocklab/redlocklab/internal/faultcheck"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/internal/proc"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// ownerSpec is a short drill whose fault (FAULT, for 10s) is active from
// t=2s to t=12s, on a lab of three nodes and one etcd member.
const ownerSpec = `---
drill: NAME
lab: {nodes: 3, persistence: always, restart_delay: 1s, etcd: 1}
workload: {guards: [redlock], rate: 10, duration: 40s, keys: uniform:100, lock_ttl: 2s}
faults:
  - {at: 2s, fault: FAULT, nodes: [1], for: 10s}
expect:
  redlock: ["safety.lock_violations>=0"]
---
`

// labEnv is the environment of a redlab run by these tests: its own lab
// registry, and the checkout's infra directory.
func labEnv(t *testing.T, registry string) []string {
	t.Helper()
	return append(os.Environ(), lab.RegistryEnv+"="+registry,
		"REDLAB_INFRA_DIR="+filepath.Join(testenv.RepoRoot(t), "infra"))
}

// registered returns the state directories in registry.
func registered(t *testing.T, registry string) []string {
	t.Helper()
	ents, err := os.ReadDir(registry)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(registry, e.Name()))
		if err != nil {
			continue // removed meanwhile
		}
		var ent struct {
			StateDir string `json:"state_dir"`
		}
		if err := json.Unmarshal(b, &ent); err != nil {
			t.Fatalf("registry entry %s: %v", e.Name(), err)
		}
		out = append(out, ent.StateDir)
	}
	return out
}

// leftProcesses are the live processes of the lab in stateDir: supervisors
// and etcd (their command line names it) and redis-servers (their working
// directory is in it).
func leftProcesses(stateDir string) []string {
	var out []string
	proc.Scan(func(pid int) bool {
		cmd := strings.Join(proc.Cmdline(pid), " ")
		cwd, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
		if strings.Contains(cmd, stateDir) || strings.HasPrefix(cwd, stateDir+"/") {
			out = append(out, fmt.Sprintf("pid %d (%s, in %s)", pid, cmd, cwd))
			return true
		}
		return false
	})
	return out
}

// labPorts are every address of the lab in stateDir: its nodes' fronts,
// redis-servers and control endpoints, its etcd members'.
func labPorts(t *testing.T, stateDir string) []string {
	t.Helper()
	var f struct {
		Nodes []struct {
			Addr      string `json:"addr"`
			RedisAddr string `json:"redis_addr"`
			Control   string `json:"control"`
		} `json:"endpoints"`
		EtcdMembers []map[string]any `json:"etcd_members"`
	}
	b, err := os.ReadFile(filepath.Join(stateDir, "lab.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range f.Nodes {
		out = append(out, n.Addr, n.RedisAddr, n.Control)
	}
	for _, m := range f.EtcdMembers {
		for _, v := range m {
			if s, ok := v.(string); ok && strings.HasPrefix(s, "127.0.0.1:") {
				out = append(out, s)
			}
		}
	}
	return out
}

// readNodeStatus reads node id's status file in stateDir.
func readNodeStatus(stateDir string, id int) (node.Status, error) {
	var st node.Status
	b, err := os.ReadFile(filepath.Join(node.Dir(stateDir, id), "node.json"))
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	return st, err
}

// listening returns the addrs something accepts connections on.
func listening(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, 200*time.Millisecond); err == nil {
			c.Close()
			out = append(out, a)
		}
	}
	return out
}

// TestDrillKilledLeavesNoLab: a drill SIGKILLed while its fault is active
// leaves nothing behind: its lab's supervisors notice their owner is gone
// and take the lab down (processes, ports, registry entry, the temporary
// state directory), and the partition's `for` was the node's to end.
func TestDrillKilledLeavesNoLab(t *testing.T) {
	bin, _ := testenv.RequireLab(t, lab.FindTerraform)
	partitioned := func(st node.Status) bool { return st.Partitioned }
	for _, tc := range []struct {
		name, fault string
		args        []string // of the drill
		active      func(st node.Status) bool
	}{
		{"partition", "partition", nil, partitioned},
		{"pause", "pause", nil, func(st node.Status) bool { return st.State == node.Paused }},
		// Prometheus and the exporters too (they run in the state dir).
		{"monitoring", "partition", []string{"--monitoring"}, partitioned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.args) > 0 {
				testenv.Require(t, "prometheus")
				testenv.Require(t, "prometheus-redis-exporter")
			}
			dir := t.TempDir()
			registry := filepath.Join(dir, "registry")
			spec := filepath.Join(dir, "owner-"+tc.name+".md")
			body := strings.NewReplacer("NAME", "owner-"+tc.name, "FAULT", tc.fault).Replace(ownerSpec)
			if err := os.WriteFile(spec, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			cmd := exec.Command(bin, append([]string{"drill", spec, "--out", filepath.Join(dir, "out")}, tc.args...)...)
			cmd.Env = labEnv(t, registry)
			cmd.Stdout, cmd.Stderr = &logs, &logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			var state string
			t.Cleanup(func() {
				if state != "" && t.Failed() {
					// Leave the machine clean even when the lab did not.
					_ = exec.Command(bin, "lab", "down", "--state-dir", state).Run()
				}
			})

			// The lab registers itself before it provisions anything.
			faultcheck.Eventually(t, 3*time.Minute, "the drill's lab is registered", func() error {
				select {
				case err := <-exited:
					t.Fatalf("drill ended before its fault: %v\n%s", err, logs.String())
				default:
				}
				if dirs := registered(t, registry); len(dirs) == 1 {
					state = dirs[0]
					return nil
				}
				return errors.New("no entry")
			})
			faultcheck.Eventually(t, 3*time.Minute, "the fault is active on node 1", func() error {
				st, err := readNodeStatus(state, 1)
				if err != nil {
					return err
				}
				if !tc.active(st) {
					return fmt.Errorf("node 1 is %s (partitioned %v)", st.State, st.Partitioned)
				}
				return nil
			})
			ports := labPorts(t, state)
			if len(tc.args) > 0 {
				// Once the drill's monitoring runs.
				var mon []byte
				faultcheck.Eventually(t, time.Minute, "the lab's monitoring runs", func() error {
					var err error
					mon, err = os.ReadFile(filepath.Join(state, "monitoring", "monitoring.json"))
					return err
				})
				mports := regexp.MustCompile(`127\.0\.0\.1:[0-9]+`).FindAllString(string(mon), -1)
				if len(mports) < 2 {
					t.Fatalf("monitoring.json names %v: want Prometheus's and the exporters' addresses", mports)
				}
				ports = append(ports, mports...)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-exited
			killed := time.Now()

			// The fault's for (10s) and the down's own time are well inside.
			faultcheck.Eventually(t, 3*time.Minute, "nothing of the lab is left", func() error {
				if p := leftProcesses(state); len(p) > 0 {
					return fmt.Errorf("processes left: %s", strings.Join(p, "; "))
				}
				if l := listening(ports); len(l) > 0 {
					return fmt.Errorf("still listening: %v", l)
				}
				if r := registered(t, registry); len(r) > 0 {
					return fmt.Errorf("registry still names %v", r)
				}
				if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("state dir %s still there (%v)", state, err)
				}
				return nil
			})
			t.Logf("%s: lab gone %v after the drill was killed", tc.name, time.Since(killed).Round(time.Second))
		})
	}
}

// TestLabListAndDownAll: `lab list` shows each lab with its owner and
// whether the owner is gone; `lab down --all` takes down the orphan only
// (a lab whose owner, a sleep, was killed after its supervisors crashed, so
// nobody took it down), `--all --force` the rest; a registry entry naming
// no lab is reported and removed, never fatal.
func TestLabListAndDownAll(t *testing.T) {
	bin, _ := testenv.RequireLab(t, lab.FindTerraform)
	dir := t.TempDir()
	registry := filepath.Join(dir, "registry")
	env := labEnv(t, registry)
	redlab := func(args ...string) (code int, stdout, stderr string) {
		t.Helper()
		var out, errOut bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errOut.String()
	}
	orphan, kept := filepath.Join(dir, "orphan"), filepath.Join(dir, "kept")
	t.Cleanup(func() {
		for _, d := range []string{orphan, kept} {
			redlab("lab", "down", "--state-dir", d)
		}
	})

	sleep := exec.Command("sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _, _ = sleep.Process.Wait() })
	for _, l := range []struct {
		dir  string
		args []string
	}{
		{orphan, []string{"--owner", strconv.Itoa(sleep.Process.Pid)}},
		{kept, nil},
	} {
		base := redistest.FreeStableBasePort(t, 1, lab.PortOffsets(0)...)
		args := append([]string{"lab", "up", "--count", "1", "--restart-delay", "1s", "--base-port", strconv.Itoa(base), "--state-dir", l.dir}, l.args...)
		if code, out, errOut := redlab(args...); code != exitOK {
			t.Fatalf("lab up %s: exit %d\n%s%s", l.dir, code, out, errOut)
		}
	}
	if code, _, errOut := redlab("lab", "up", "--count", "1", "--owner", "0", "--state-dir", filepath.Join(dir, "bad")); code != exitUsage || !strings.Contains(errOut, "--owner 0") {
		t.Errorf("lab up --owner 0: exit %d, stderr %q; want exit 2 naming --owner", code, errOut)
	}

	// A partition given --for ends on the node, with no heal sent.
	if code, out, errOut := redlab("fault", "partition", "1", "--for", "1s", "--state-dir", kept); code != exitOK {
		t.Fatalf("fault partition 1 --for 1s: exit %d\n%s%s", code, out, errOut)
	}
	if st, err := readNodeStatus(kept, 1); err != nil || !st.Partitioned {
		t.Fatalf("node 1 after fault partition --for 1s: %+v (%v), want partitioned", st, err)
	}
	faultcheck.Eventually(t, time.Minute, "the partition's for ends it", func() error {
		st, err := readNodeStatus(kept, 1)
		if err != nil {
			return err
		}
		if st.Partitioned || st.Active["partition"] != "" {
			return fmt.Errorf("node 1 still partitioned: %+v", st)
		}
		return nil
	})

	code, out, errOut := redlab("lab", "list")
	if code != exitOK {
		t.Fatalf("lab list: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{orphan + "  1 ", kept + "  ", strconv.Itoa(sleep.Process.Pid), "yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("lab list: want %q in:\n%s", want, out)
		}
	}

	// The orphan's supervisors crash first: nobody is left to watch the
	// owner, so its end leaves the lab behind (its redis-server runs on).
	st, err := readNodeStatus(orphan, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(st.SupervisorPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !proc.WaitGone(t.Context(), st.SupervisorPID, 10*time.Second) {
		t.Fatalf("supervisor %d outlived SIGKILL", st.SupervisorPID)
	}
	_ = sleep.Process.Kill()
	_, _ = sleep.Process.Wait()
	stale := filepath.Join(registry, "stale.json")
	if err := os.WriteFile(stale, []byte(`{"state_dir": "`+filepath.Join(dir, "nowhere")+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}

	var labs []lab.Listed
	code, out, errOut = redlab("lab", "list", "--json")
	if code != exitOK {
		t.Fatalf("lab list --json: exit %d\n%s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &labs); err != nil {
		t.Fatalf("lab list --json: %v\n%s", err, out)
	}
	byDir := map[string]lab.Listed{}
	for _, l := range labs {
		byDir[l.StateDir] = l
	}
	if l := byDir[orphan]; !l.Orphan || l.OwnerAlive || l.Owner == nil || l.Owner.PID != sleep.Process.Pid || l.State() != "down" {
		t.Errorf("orphan in lab list: %+v, want owner %d gone, an orphan, down", l, sleep.Process.Pid)
	}
	if l := byDir[kept]; l.Orphan || l.Owner != nil || l.State() != "up" {
		t.Errorf("lab without owner in lab list: %+v, want no owner, not an orphan, up", l)
	}
	if !strings.Contains(errOut, "nowhere") || !strings.Contains(errOut, "removed") {
		t.Errorf("lab list with a stale entry: stderr %q, want it reported as removed", errOut)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale registry entry still there after lab list (%v)", err)
	}
	if len(leftProcesses(orphan)) == 0 {
		t.Fatal("the orphan's redis-server is gone before lab down --all: nothing left to test")
	}

	code, out, errOut = redlab("lab", "down", "--all")
	if code != exitOK {
		t.Fatalf("lab down --all: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, orphan+" is clear") || strings.Contains(out, kept) {
		t.Errorf("lab down --all: stdout %q, want the orphan only taken down", out)
	}
	if p := leftProcesses(orphan); len(p) > 0 {
		t.Errorf("orphan's processes after lab down --all: %v", p)
	}
	if got := registered(t, registry); len(got) != 1 || got[0] != kept {
		t.Errorf("registry after lab down --all: %v, want only %s", got, kept)
	}
	if len(leftProcesses(kept)) == 0 {
		t.Errorf("lab down --all took down %s, which has no owner", kept)
	}

	code, out, errOut = redlab("lab", "down", "--all", "--force")
	if code != exitOK || !strings.Contains(out, kept+" is clear") {
		t.Fatalf("lab down --all --force: exit %d, stdout %q\n%s", code, out, errOut)
	}
	if p := leftProcesses(kept); len(p) > 0 {
		t.Errorf("processes after lab down --all --force: %v", p)
	}
	if got := registered(t, registry); len(got) != 0 {
		t.Errorf("registry after lab down --all --force: %v, want empty", got)
	}
	if code, out, _ := redlab("lab", "list"); code != exitOK || !strings.Contains(out, "no labs") {
		t.Errorf("lab list with no labs: exit %d, stdout %q", code, out)
	}
}

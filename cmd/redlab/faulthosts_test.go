package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/redlocklab/redlocklab/infra/hostfault"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/internal/sshtest"
)

func writeInventory(t *testing.T, inv *hosts.Inventory) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hosts.json")
	if err := hosts.Write(path, inv); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHostsFaultSSH drives `redlab fault --hosts` and `redlab heal --hosts`
// over a real sshd. The test host does not run systemd, so the faults and
// the heal reach it and refuse there, saying why; refusals that need no
// host (a lab machine's power loss, a fault with no SSH form) are usage
// errors before anything is sent.
func TestHostsFaultSSH(t *testing.T) {
	srv := sshtest.Start(t)
	inv := &hosts.Inventory{KnownHosts: srv.KnownHosts, Hosts: []hosts.Host{srv.Host}}
	file := writeInventory(t, inv)

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"heal reaches the host", []string{"heal", "--hosts", file}, exitFailure, "does not run systemd"},
		{"kill reaches the host", []string{"fault", "kill", "1", "--hosts", file}, exitFailure, "does not run systemd"},
		{"no such host", []string{"fault", "kill", "2", "--hosts", file}, exitUsage, "host 2: the inventory has hosts 1 to 1"},
		{"no SSH form", []string{"fault", "clock-rate", "1", "--factor", "2", "--for", "1s", "--hosts", file}, exitUsage, "on a real host, clock-jump steps the clock for real"},
		{"from without partition", []string{"fault", "kill", "1", "--from", "1", "--hosts", file}, exitUsage, "--from is for partition only"},
		{"heal needs hosts", []string{"heal"}, exitUsage, "--hosts FILE is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runArgs(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.stderr)
			}
		})
	}

	m := srv.Host
	m.Type = hosts.Machine
	mfile := writeInventory(t, &hosts.Inventory{KnownHosts: srv.KnownHosts, Hosts: []hosts.Host{m}})
	if code, _, stderr := runArgs(t, "fault", "power-loss", "1", "--hosts", mfile); code != exitUsage || !strings.Contains(stderr, "lab's power cut") {
		t.Errorf("power-loss of a machine: exit %d, stderr %q; want %d and the lab's power cut", code, stderr, exitUsage)
	}

	// Another key for the host in known_hosts: refused, loudly; with
	// --insecure-ignore-host-key it connects and warns.
	other := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(other, []byte(knownhosts.Line([]string{srv.Host.SSHAddress()}, sshtest.NewHostKey(t))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := writeInventory(t, &hosts.Inventory{KnownHosts: other, Hosts: []hosts.Host{srv.Host}})
	if code, _, stderr := runArgs(t, "heal", "--hosts", bad); code != exitFailure || !strings.Contains(stderr, "HOST KEY MISMATCH") {
		t.Errorf("mismatch: exit %d, stderr %q; want %d and HOST KEY MISMATCH", code, stderr, exitFailure)
	}
	code, _, stderr := runArgs(t, "heal", "--hosts", bad, "--insecure-ignore-host-key")
	if !strings.Contains(stderr, "WARNING: --insecure-ignore-host-key") || !strings.Contains(stderr, "does not run systemd") || code != exitFailure {
		t.Errorf("insecure: exit %d, stderr %q; want the warning, then the host's refusal", code, stderr)
	}
}

// TestHostsWeakenRefusedOutsideADrillEnvironment: an inventory not marked
// drill_environment is refused before any connection (the host's sshd is
// reachable; a connection would show in the next step's output).
func TestHostsWeakenRefusedOutsideADrillEnvironment(t *testing.T) {
	srv := sshtest.Start(t)
	prod := writeInventory(t, &hosts.Inventory{KnownHosts: srv.KnownHosts, Hosts: []hosts.Host{srv.Host}})
	code, stdout, stderr := runArgs(t, "hosts", "weaken", "--hosts", prod, "--everysec")
	if code != exitFailure || !strings.Contains(stderr, `not marked "drill_environment": true`) || stdout != "" {
		t.Errorf("production inventory: exit %d, stdout %q, stderr %q; want %d and the refusal", code, stdout, stderr, exitFailure)
	}
	if strings.Contains(stderr, "does not run systemd") {
		t.Errorf("the refusal reached the host: %q", stderr)
	}
	drill := writeInventory(t, &hosts.Inventory{DrillEnvironment: true, KnownHosts: srv.KnownHosts, Hosts: []hosts.Host{srv.Host}})
	// A drill environment is reached: this host then refuses, not running systemd.
	if code, _, stderr := runArgs(t, "hosts", "weaken", "--hosts", drill, "--everysec", "--no-delay"); code != exitFailure || !strings.Contains(stderr, "does not run systemd") {
		t.Errorf("drill environment: exit %d, stderr %q; want the host reached", code, stderr)
	}
	if code, _, stderr := runArgs(t, "hosts", "weaken", "--hosts", drill); code != exitUsage || !strings.Contains(stderr, "at least one of --everysec") {
		t.Errorf("no weakening: exit %d, stderr %q", code, stderr)
	}
}

// TestHostsRunbookCommandLines: every redlab command line with --hosts that a
// runbook shows parses (its flags and node numbers are right): it gets as
// far as reading the inventory, which does not exist here.
func TestHostsRunbookCommandLines(t *testing.T) {
	files, _ := filepath.Glob("../../runbooks/drills/*.md")
	files = append(files, "../../runbooks/README.md")
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			line, _, _ = strings.Cut(line, "#")
			line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "sleep 40; "))
			line = strings.TrimPrefix(line, "sleep 20; ")
			if !strings.HasPrefix(line, "redlab ") || !strings.Contains(line, "--hosts hosts.json") {
				continue
			}
			line = strings.TrimSuffix(strings.TrimSuffix(line, ";"), "\\")
			seen++
			args := strings.Fields(strings.ReplaceAll(strings.ReplaceAll(line, `"$R1"`, "10.0.9.1"), "hosts.json", filepath.Join(t.TempDir(), "absent.json")))[1:]
			code, _, stderr := runArgs(t, args...)
			if code != exitUsage || !strings.Contains(stderr, "absent.json: no such file") {
				t.Errorf("%s: %q: exit %d, stderr %q; want it to reach the inventory", filepath.Base(f), line, code, stderr)
			}
		}
	}
	if seen < 10 {
		t.Errorf("found %d runbook command lines with --hosts, want at least 10", seen)
	}
}

// TestHostsFaultKindsAreCommands: every kind of the SSH backend's table is a
// `redlab fault` subcommand that --hosts reaches.
func TestHostsFaultKindsAreCommands(t *testing.T) {
	cmds := map[string]bool{}
	for _, d := range nodeKinds() {
		cmds[string(d.Kind)] = true
	}
	for _, kind := range hostfault.Kinds() {
		if !cmds[kind] {
			t.Errorf("hostfault kind %q is not a redlab fault subcommand", kind)
		}
	}
}

// TestHostsDrillRefusals: `redlab drill --hosts` checks every spec against
// the inventory before anything runs.
func TestHostsDrillRefusals(t *testing.T) {
	one := writeInventory(t, &hosts.Inventory{Hosts: []hosts.Host{{Address: "10.0.0.1", Redis: "10.0.0.1:6379", User: "admin", Type: hosts.VM}}})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"drill", "--check", "--hosts", one, "../../runbooks/drills/one-node-loss.md"}, "wants 5 nodes, the inventory has 1 hosts"},
		{[]string{"drill", "--hosts", one, "--monitoring", "../../runbooks/drills/one-node-loss.md"}, "--monitoring and --machines are for the lab"},
	} {
		code, stdout, stderr := runArgs(t, tc.args...)
		if code != exitUsage || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d and %q", tc.args, code, stdout, stderr, exitUsage, tc.want)
		}
	}
}

package drill

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
	"github.com/redlocklab/redlocklab/infra/remote"
	"github.com/redlocklab/redlocklab/internal/sshtest"
)

const hostsSpec = `---
drill: hosts-kill-pause
lab: {nodes: 3, persistence: always, restart_delay: 2s}
workload: {guards: [redlock], rate: 20, duration: 6s, keys: uniform:50, lock_ttl: 2s, seed: 1}
faults:
  - {at: 1s, fault: kill, nodes: [1]}
  - {at: 2s, fault: pause, nodes: [2], for: 1s}
expect:
  redlock: ["safety.lock_violations==0"]
---
`

func TestHostsCheck(t *testing.T) {
	inv := &hosts.Inventory{Hosts: make([]hosts.Host, 3)}
	spec, err := Parse("hosts-kill-pause.md", []byte(hostsSpec))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckHosts(spec, inv); err != nil {
		t.Errorf("production profile on production hosts: %v", err)
	}
	weak, err := Parse("hosts-kill-pause.md", []byte(strings.Replace(hostsSpec, "persistence: always, restart_delay: 2s", "persistence: everysec, restart_delay: 0s", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckHosts(weak, inv); !errors.Is(err, hosts.ErrNotDrillEnvironment) {
		t.Errorf("a weaker profile on production hosts: got %v, want ErrNotDrillEnvironment", err)
	}
	if got := weakenings(weak); len(got) != 3 || strings.Join(got[2], ",") != "everysec,no-delay" {
		t.Errorf("weakenings %v, want everysec,no-delay on each of 3 nodes", got)
	}
	inv.Hosts = inv.Hosts[:2]
	if err := CheckHosts(spec, inv); err == nil || !strings.Contains(err.Error(), "the inventory has 2 hosts") {
		t.Errorf("3 nodes on 2 hosts: got %v", err)
	}
}

// TestHostsLeaveEtcdOut: on hosts, the shipped specs whose etcd members
// carry guards beside a fault of the Redis nodes run without them, their
// guards (left out, named) and the twins of the fault on them; a spec whose
// faults are all on etcd members is refused.
func TestHostsLeaveEtcdOut(t *testing.T) {
	inv := &hosts.Inventory{Hosts: make([]hosts.Host, 5)}
	b, err := os.ReadFile(filepath.Join("..", "runbooks", "drills", "one-node-loss.md"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := Parse("one-node-loss.md", b)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckHosts(spec, inv); err != nil {
		t.Errorf("one-node-loss on 5 hosts: %v", err)
	}
	on, out := forHosts(spec)
	if on.Lab.Etcd != 0 || len(out) == 0 {
		t.Errorf("one-node-loss on hosts: etcd %d, left out %v; want no members and the etcd guards left out", on.Lab.Etcd, out)
	}
	for _, f := range on.Faults {
		if len(f.Etcd) > 0 {
			t.Errorf("the fault at line %d, on etcd members, still runs on hosts", f.Line)
		}
	}
	if len(on.Faults) == 0 || len(spec.Faults) != len(on.Faults)+1 {
		t.Errorf("one-node-loss on hosts: %d faults of %d, want the kill of node 2 alone", len(on.Faults), len(spec.Faults))
	}
	for _, g := range on.Workload.Guards {
		if g.NeedsEtcd() {
			t.Errorf("guard %s still runs on hosts", g)
		}
		if _, ok := on.Expect[g]; !ok && len(spec.Expect[g]) > 0 {
			t.Errorf("guard %s lost its expectations", g)
		}
	}
	b, err = os.ReadFile(filepath.Join("..", "runbooks", "drills", "etcd-leader-loss.md"))
	if err != nil {
		t.Fatal(err)
	}
	etcdSpec, err := Parse("etcd-leader-loss.md", b)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckHosts(etcdSpec, inv); err == nil || !strings.Contains(err.Error(), "faults on etcd members") {
		t.Errorf("etcd-leader-loss on hosts: got %v, want the etcd faults refused", err)
	}
}

// TestHostsDrill runs a drill over SSH on three machines, each with its own
// sshd and Redis node: the faults reach them through infra/hostfault, the
// kill ends when the node answers again, and nothing is left on the hosts.
func TestHostsDrill(t *testing.T) {
	var ms []*sshtest.Machine
	inv := &hosts.Inventory{}
	var kh strings.Builder
	for i := range 3 {
		m := sshtest.StartMachine(t, "redlab-drill-host-"+string(rune('1'+i)), sshtest.FreePort(t))
		ms = append(ms, m)
		inv.Hosts = append(inv.Hosts, m.Host)
		kh.WriteString(knownhosts.Line([]string{m.Host.SSHAddress()}, m.HostKey) + "\n")
	}
	inv.KnownHosts = filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(inv.KnownHosts, []byte(kh.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	spec, err := Parse("hosts-kill-pause.md", []byte(hostsSpec))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var log strings.Builder
	res, err := Run(context.Background(), spec, Options{Out: out, Log: &log, Hosts: &HostsConfig{Inventory: inv, Remote: remote.Config{KnownHosts: inv.KnownHosts}}})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !res.Passed || res.Transport != TransportSSH {
		t.Errorf("passed %v, transport %q; want true, ssh\n%s", res.Passed, res.Transport, log.String())
	}
	faults, err := faultlog.Read(filepath.Join(out, spec.Name, faultlog.FileName))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range faults {
		if f.Active() {
			t.Errorf("fault %s on node %d never ended", f.Kind, f.Node)
		}
		got[string(f.Kind)+"@"+string(rune('0'+f.Node))] = true
	}
	if !got["kill@1"] || !got["pause@2"] {
		t.Errorf("faults.jsonl has %v, want kill on node 1 and pause on node 2", got)
	}
	for i, m := range ms {
		out, _ := m.Exec(context.Background(), "systemctl list-units --all --plain --no-legend 'redlab-heal-*'; ls /run/redlab/faults 2>/dev/null; systemctl show -p SubState --value redlock-redis")
		if strings.TrimSpace(out) != "running" {
			t.Errorf("host %d after the drill: %q, want only Redis running", i+1, out)
		}
	}
}

package hostfault

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/remote"
	"github.com/redlocklab/redlocklab/internal/sshtest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

var (
	vm          = hosts.Host{Address: "10.0.1.10", Redis: "10.0.1.10:6379", User: "admin", Type: hosts.VM}
	machineHost = hosts.Host{Address: "127.0.0.2", Redis: "127.0.0.2:6379", User: "root", Type: hosts.Machine}
)

// shCheck parses script with the real dash, as the hosts' /bin/sh does.
func shCheck(t *testing.T, name, script string) {
	t.Helper()
	dash := testenv.Require(t, "dash")
	cmd := exec.Command(dash, "-n")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: dash -n: %v\n%s\n--- script:\n%s", name, err, out, script)
	}
}

// heredocBodies returns what the script's here-documents write.
func heredocBodies(script string) []string {
	re := regexp.MustCompile(`(?s)<<'REDLAB_EOF'\n(.*?)\nREDLAB_EOF\n`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(script, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestOwnNetnsMachine: a machine of its own network namespace takes a VM's
// network faults and sweeps its network on heal; one without refuses them.
func TestOwnNetnsMachine(t *testing.T) {
	own := machineHost
	own.OwnNetns = true
	for _, kind := range []string{"partition", "latency"} {
		s, err := InjectScript(kind, "0badcafe", own, fault.Params{"add": {D: 20 * time.Millisecond}}, nil, time.Minute)
		if err != nil {
			t.Fatalf("%s on an own-netns machine: %v", kind, err)
		}
		want, _ := InjectScript(kind, "0badcafe", hosts.Host{Address: own.Address, Redis: own.Redis, User: own.User, Type: hosts.VM}, fault.Params{"add": {D: 20 * time.Millisecond}}, nil, time.Minute)
		if s != want {
			t.Errorf("%s on an own-netns machine: not the VM's script:\n%s", kind, s)
		}
		shCheck(t, kind, s)
		if _, err := InjectScript(kind, "0badcafe", machineHost, fault.Params{}, nil, time.Minute); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "own_netns") {
			t.Errorf("%s on a machine sharing the host's network: got %v, want refused, naming own_netns", kind, err)
		}
	}
	if _, err := InjectScript("clock-jump", "0badcafe", own, fault.Params{"by": {D: time.Second}}, nil, time.Minute); !errors.Is(err, ErrRefused) {
		t.Errorf("clock-jump on an own-netns machine: got %v, want refused", err)
	}
	if h := HealAllScript(own); !strings.Contains(h, "iptables -X") || !strings.Contains(h, "tc qdisc del") {
		t.Errorf("heal-all on an own-netns machine: want the network sweep")
	}
}

// TestTableScripts: every kind renders for every host type or refuses with a
// reason; every script parses; the switch is armed before the injection.
func TestTableScripts(t *testing.T) {
	p := fault.Params{fault.For: {D: 4 * time.Second}, "delay": {D: 3 * time.Second}, "add": {D: 20 * time.Millisecond}, "jitter": {D: 5 * time.Millisecond}, "by": {D: 15 * time.Second}}
	for _, spec := range Table {
		for _, h := range []hosts.Host{vm, machineHost} {
			name := spec.Kind + "/" + string(h.Type)
			t.Run(name, func(t *testing.T) {
				s, err := InjectScript(spec.Kind, "0badcafe", h, p, nil, 34*time.Second)
				c := spec.Commands[h.Type]
				if c.Refuse != "" {
					var re *RefusedError
					if !errors.As(err, &re) || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.Refuse) {
						t.Fatalf("got %v, want a refusal saying %q", err, c.Refuse)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				shCheck(t, name, s)
				inject := strings.Index(s, c.Inject)
				if inject < 0 {
					t.Fatalf("the script does not run the table's Inject %q", c.Inject)
				}
				arm := strings.Index(s, "systemd-run --quiet --unit=redlab-heal-0badcafe --on-active=34000ms --timer-property=AccuracySec=100ms")
				switch {
				case c.Heal == "" && arm >= 0:
					t.Error("a fault with nothing to heal arms a switch")
				case c.Heal != "" && (arm < 0 || arm > inject):
					t.Errorf("the switch is armed at %d, the injection at %d: want the switch first", arm, inject)
				}
				if c.Heal != "" {
					bodies := heredocBodies(s)
					heal := strings.Join(bodies[len(bodies)-2:], "\n")
					if !strings.Contains(heal, c.Heal) || !strings.Contains(heal, "ID='0badcafe'") {
						t.Errorf("heal file %q lacks the heal or the variables", heal)
					}
					shCheck(t, name+" heal", heal)
				}
			})
		}
	}
	for _, s := range []string{HealScript("0badcafe"), HealAllScript(hosts.Host{Type: hosts.VM}), HealAllScript(hosts.Host{Type: hosts.Machine})} {
		shCheck(t, "heal", s)
	}
}

func TestTableRefusals(t *testing.T) {
	_, err := InjectScript("power-loss", "1", machineHost, fault.Params{}, nil, time.Minute)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "lab's power cut") {
		t.Errorf("power-loss on a machine: got %v, want a refusal naming the lab's power cut", err)
	}
	if _, err := InjectScript("failover", "1", vm, fault.Params{}, nil, time.Minute); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("unknown kind: got %v, want ErrUnknownKind", err)
	}
	if _, err := InjectScript("partition", "1", vm, fault.Params{}, []string{"10.0.0.1; reboot"}, time.Minute); err == nil || !strings.Contains(err.Error(), "want an IP address") {
		t.Errorf("bad peer: got %v, want an error", err)
	}
	s, err := InjectScript("power-loss", "1", vm, fault.Params{}, nil, time.Minute)
	if err != nil || !strings.Contains(s, "echo b > /proc/sysrq-trigger") || strings.Contains(s, "kernel.sysrq") || strings.Contains(s, "/proc/sys/kernel/sysrq") {
		t.Errorf("power-loss on a VM: %v\n%s\nwant sysrq b without touching kernel.sysrq", err, s)
	}
}

// TestClockStepHelper runs the helper with the real python3, only ever
// with a zero step (which checks and never steps): it refuses in a container
// and without CAP_SYS_TIME, saying why.
func TestClockStepHelper(t *testing.T) {
	py := testenv.Require(t, "python3")
	setpriv := testenv.Require(t, "setpriv")
	path := filepath.Join(t.TempDir(), "clock-step")
	if err := os.WriteFile(path, []byte(clockStepHelper), 0o644); err != nil {
		t.Fatal(err)
	}
	container := false
	for _, m := range []string{"/run/systemd/container", "/.dockerenv"} {
		if _, err := os.Stat(m); err == nil {
			container = true
		}
	}
	st, _ := os.ReadFile("/proc/self/status")
	capTime := regexp.MustCompile(`CapEff:\s*[0-9a-f]*[2367abef][0-9a-f]{6}\n`).Match(st) // bit 25
	out, err := exec.Command(py, path, "0").CombinedOutput()
	switch {
	case container:
		if err == nil || !strings.Contains(string(out), "it is a container") {
			t.Errorf("in a container: err %v, output %q; want a refusal naming the container", err, out)
		}
	case capTime:
		if err != nil {
			t.Errorf("with CAP_SYS_TIME: %v: %s", err, out)
		}
	}
	if container {
		return // the CAP_SYS_TIME check comes after, unreachable here
	}
	out, err = exec.Command(setpriv, "--bounding-set", "-sys_time", py, path, "0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cannot step its clock: the process lacks CAP_SYS_TIME") {
		t.Errorf("without CAP_SYS_TIME: err %v, output %q; want a refusal saying why", err, out)
	}
}

// TestSSHHealAllOnAHostWithoutFaults runs the heal of everything over a real
// SSH connection on a host that never had a fault: it finds nothing to
// heal in redlab's state, and exits cleanly even without systemd.
func TestSSHHealScriptsRun(t *testing.T) {
	srv := sshtest.Start(t)
	ctx := context.Background()
	c, err := remote.Dial(ctx, srv.Host, remote.Config{KnownHosts: srv.KnownHosts})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A heal of a fault that is not there is a no-op that succeeds.
	if _, err := c.Run(ctx, HealScript(NewID())); err != nil {
		t.Errorf("heal of an absent fault: %v", err)
	}
	// A refused kind never reaches the host.
	h := srv.Host
	h.Type = hosts.Machine
	if _, err := Inject(ctx, c, Fault{Kind: "power-loss", Host: h}, fault.Params{}, Options{}); !errors.Is(err, ErrRefused) {
		t.Errorf("power-loss on a machine: got %v, want ErrRefused", err)
	}
}

// TestTableMatchesCatalogue: the table has a row for every kind the fault
// catalogue lets a host over SSH apply (heal is redlab heal), and no other.
func TestTableMatchesCatalogue(t *testing.T) {
	for _, d := range fault.Defs() {
		_, inTable := Lookup(string(d.Kind))
		switch {
		case d.Kind == fault.Heal:
			if inTable {
				t.Errorf("heal has a row: it is HealScript and HealAllScript")
			}
		case d.Can(fault.SSHHost) && !inTable:
			t.Errorf("the catalogue lets hosts over SSH take %s, the table has no row for it", d.Kind)
		case !d.Can(fault.SSHHost) && inTable:
			t.Errorf("the table has %s, which the catalogue does not let hosts over SSH take", d.Kind)
		}
	}
	for _, s := range Table {
		if _, ok := fault.Lookup(fault.Kind(s.Kind)); !ok {
			t.Errorf("table kind %q is not in the catalogue", s.Kind)
		}
	}
}

// TestHealAllLeavesAMachinesNetworkAlone: a machine's network is its host's.
func TestHealAllLeavesAMachinesNetworkAlone(t *testing.T) {
	if vm := HealAllScript(hosts.Host{Type: hosts.VM}); !strings.Contains(vm, "tc qdisc del") || !strings.Contains(vm, "iptables -X") {
		t.Errorf("a VM's sweep lacks the network:\n%s", vm)
	}
	if m := HealAllScript(hosts.Host{Type: hosts.Machine}); strings.Contains(m, "tc qdisc") || strings.Contains(m, "iptables") {
		t.Errorf("a machine's sweep touches the network:\n%s", m)
	}
}

package hostfault

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/lab/faultlog"
	"github.com/redlocklab/redlocklab/infra/remote"
	"github.com/redlocklab/redlocklab/internal/sshtest"
)

// TestSession drives one machine over SSH through a session, as a drill
// on hosts does: each fault is a fault.Injector call, a crash ends in the
// record when Redis answers again, a pause is healed by the session after
// its `for`, start heals the stop, and a fault still kept at Close is left
// to its dead-man switch.
func TestSession(t *testing.T) {
	m := sshtest.StartMachine(t, "redlab-session-test", sshtest.FreePort(t))
	inv := &hosts.Inventory{Hosts: []hosts.Host{m.Host}, KnownHosts: filepath.Join(t.TempDir(), "known_hosts")}
	if err := os.WriteFile(inv.KnownHosts, []byte(knownhosts.Line([]string{m.Host.SSHAddress()}, m.HostKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	log := filepath.Join(t.TempDir(), faultlog.FileName)
	var mu sync.Mutex
	var healed []string
	s, err := Dial(ctx, inv, nil, SessionOptions{
		Options: Options{Horizon: 5 * time.Minute, Margin: time.Minute}, Remote: remote.Config{KnownHosts: inv.KnownHosts},
		FaultLog: log, Log: t.Logf,
		Healed: func(n int, f Fault) {
			mu.Lock()
			defer mu.Unlock()
			healed = append(healed, f.Kind)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.Host(1)
	record := func(id string) faultlog.Fault {
		t.Helper()
		fs, _ := faultlog.Read(log)
		for _, f := range fs {
			if f.ID == id {
				return f
			}
		}
		t.Fatalf("fault %s is not in the record (%+v)", id, fs)
		return faultlog.Fault{}
	}
	ended := func(what, id string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for record(id).Active() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: fault %s never ended in the record", what, id)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	redis := func() string {
		out, _ := m.Exec(ctx, "systemctl show -p SubState --value redlock-redis")
		return strings.TrimSpace(out)
	}

	res, err := h.Apply(ctx, fault.Kill, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != fault.Kill || res.ID == "" || res.Target != 1 || res.HealsBy.Sub(res.Start) != 5*time.Minute {
		t.Errorf("kill: %+v, want its id, host 1 and a switch 5m after its start", res)
	}
	ended("kill", res.ID) // Redis answered again

	res, err = h.Apply(ctx, fault.Pause, fault.Params{fault.For: {D: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if want := res.Start.Add(time.Second + time.Minute); !res.HealsBy.Equal(want) {
		t.Errorf("pause for 1s: switch at %v, want its for plus the margin", res.HealsBy.Sub(res.Start))
	}
	ended("pause", res.ID) // the session healed it

	stop, err := h.Apply(ctx, fault.Stop, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := redis(); got == "running" {
		t.Errorf("after stop redis is %s", got)
	}
	if _, err := h.Apply(ctx, fault.Start, nil); err != nil {
		t.Fatal(err)
	}
	ended("stop", stop.ID)
	if _, err := h.Apply(ctx, fault.ClockJump, fault.Params{"by": {D: time.Second}}); err == nil {
		t.Error("clock-jump on a machine: accepted, want it refused")
	}

	// What is kept at the end heals with Heal, recording its end once.
	if err := s.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := strings.Join(healed, ",")
	mu.Unlock()
	if got != "pause,stop,kill" {
		t.Errorf("healed %s, want the pause (after its for), the stop (by start), then the kill's switch (Heal)", got)
	}
	fs, _ := faultlog.Read(log)
	for _, f := range fs {
		if f.Active() {
			t.Errorf("fault %s %s never ended", f.Kind, f.ID)
		}
	}
	if len(fs) != 3 {
		t.Errorf("recorded %d faults (%+v), want kill, pause and stop: a start has nothing to record", len(fs), fs)
	}

	// A stop kept at Close stays, and so does its switch.
	left, err := h.Apply(ctx, fault.Stop, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if out, _ := m.Exec(ctx, "systemctl is-active "+HealUnitPrefix+left.ID+".timer"); strings.TrimSpace(out) != "active" {
		t.Errorf("after Close the stop's switch is %q, want active", out)
	}
	if got := redis(); got == "running" {
		t.Errorf("after Close redis is %s, want still stopped", got)
	}
	out, err := m.Exec(ctx, HealAllScript(m.Host))
	if err != nil || !strings.Contains(out, "healed: fault "+left.ID) {
		t.Errorf("heal all after Close: %q, %v", out, err)
	}
}

package drill

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/infra/remote"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

// TestHostsDrillsOnSSHLab runs the shipped one-node-loss and
// minority-partition drills over SSH on a lab of five machines brought up
// with SSH (their Redis guards; the inventory has no etcd members), reading
// the inventory the lab wrote as `redlab drill --hosts "$REDLAB_HOSTS"`
// does; each passes with transport ssh, and down leaves nothing. About two
// minutes on two cores (five machines up in 40 s, each drill 32 s); `make
// drills-ssh` runs it alone.
func TestHostsDrillsOnSSHLab(t *testing.T) {
	if os.Getenv("REDLAB_DRILLS_SSH") != "1" {
		// Not part of make test: in one CI run its one-node-loss missed its
		// availability bar on five machines sharing two cores with the
		// suite (node timeouts), where it had passed alone. TestHostsDrill
		// is the drill over SSH that make test runs.
		t.Skip("make drills-ssh runs it (REDLAB_DRILLS_SSH=1)")
	}
	if err := node.CheckMachineHost(); err != nil {
		testenv.Missing(t, err.Error())
	}
	cfg := requireLab(t)
	var specs []*Spec
	for _, name := range []string{"one-node-loss", "minority-partition"} {
		b, err := os.ReadFile(filepath.Join("..", "runbooks", "drills", name+".md"))
		if err != nil {
			t.Fatal(err)
		}
		spec, err := Parse(name+".md", b)
		if err != nil {
			t.Fatal(err)
		}
		specs = append(specs, spec)
	}
	cfg.StateDir = filepath.Join(t.TempDir(), "lab")
	cfg.Nodes = specs[0].Lab.Nodes
	cfg.BasePort = redistest.FreeStableBasePort(t, cfg.Nodes, lab.PortOffsets(0)...)
	cfg.RestartDelay = specs[0].Lab.RestartDelay
	cfg.Machines, cfg.SSH = true, true
	ctx := context.Background()
	downed := false
	t.Cleanup(func() { // also after a failed Up: what it started goes
		if !downed {
			if err := lab.Down(context.Background(), cfg); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	started := time.Now()
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d machines with SSH up in %v", cfg.Nodes, time.Since(started).Round(time.Second))
	inv, err := hosts.Load(l.HostsFile())
	if err != nil {
		t.Fatal(err)
	}
	creds, err := l.Credentials()
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range specs {
		if err := CheckHosts(spec, inv); err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		var log strings.Builder
		start := time.Now()
		res, err := Run(ctx, spec, Options{Out: out, Log: &log, Hosts: &HostsConfig{
			Inventory: inv, Remote: remote.Config{KnownHosts: inv.KnownHosts},
			Username: creds.Redlock.Name, Password: creds.Redlock.Password,
		}})
		if err != nil {
			t.Fatalf("%s: %v\n%s", spec.Name, err, log.String())
		}
		t.Logf("%s over SSH: passed %v in %v", spec.Name, res.Passed, time.Since(start).Round(time.Second))
		if !res.Passed || res.Transport != TransportSSH {
			t.Errorf("%s: passed %v, transport %q; want true, ssh\n%s", spec.Name, res.Passed, res.Transport, log.String())
		}
		b, err := os.ReadFile(filepath.Join(out, spec.Name, ResultFile))
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Transport string `json:"transport"`
		}
		if err := json.Unmarshal(b, &rec); err != nil || rec.Transport != TransportSSH {
			t.Errorf("%s: result.json transport %q (%v), want ssh", spec.Name, rec.Transport, err)
		}
	}
	if err := lab.Down(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	downed = true
	for _, ns := range []string{"/run/netns"} {
		entries, _ := os.ReadDir(ns)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "redlab-") {
				t.Errorf("network namespace %s left after down", e.Name())
			}
		}
	}
}

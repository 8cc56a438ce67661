package plan

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/hosts"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/infra/remote"
	"github.com/redlocklab/redlocklab/internal/redistest"
	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/loadgen"
)

// TestPlanOnSSHLab makes a plan for the hosts of a lab of three machines
// brought up with --machines --ssh, reading the inventory the lab wrote as
// `redlab plan --hosts "$REDLAB_HOSTS"` does: each data disk and each
// clock is measured over SSH as root, on the machine (the Redis data
// directory of infra/modules/redis-node, chronyc and the chrony.conf the
// module renders), with a short sweep and no verification. About half a
// minute once the machine image is built; root and systemd-nspawn (`make
// plan-ssh` runs it alone).
func TestPlanOnSSHLab(t *testing.T) {
	if err := node.CheckMachineHost(); err != nil {
		testenv.Missing(t, err.Error())
	}
	bin, tf := testenv.RequireLab(t, lab.FindTerraform)
	const n = 3
	cfg := lab.Config{Profile: profile.Profile{Nodes: n, RestartDelay: 2 * time.Second, Machines: true, SSH: true},
		StateDir: filepath.Join(t.TempDir(), "lab"), Redlab: bin, Terraform: tf, InfraDir: filepath.Join(testenv.RepoRoot(t), "infra")}
	cfg.BasePort = redistest.FreeStableBasePort(t, n, lab.PortOffsets(0)...)
	ctx := context.Background()
	t.Cleanup(func() {
		if err := lab.Down(context.Background(), cfg); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	started := time.Now()
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d machines with SSH up in %v", n, time.Since(started).Round(time.Second))
	inv, err := hosts.Load(l.HostsFile())
	if err != nil {
		t.Fatal(err)
	}
	creds, err := l.Credentials()
	if err != nil {
		t.Fatal(err)
	}
	site, err := HostsSite(ctx, inv, remote.Config{KnownHosts: inv.KnownHosts},
		Login{User: creds.Redlock.Name, Password: creds.Redlock.Password}, Login{User: creds.Monitor.Name, Password: creds.Monitor.Password})
	if err != nil {
		t.Fatal(err)
	}
	defer site.Close()
	slo, err := loadgen.ParseThreshold("acquire.p99<20ms")
	if err != nil {
		t.Fatal(err)
	}
	hold, err := HoldOf(loadgen.HoldSpec{Min: time.Second, Max: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pc := DefaultConfig()
	pc.Site = site
	pc.Target = Target{Rate: 100, SLO: []loadgen.Threshold{slo}, Hold: hold}
	pc.Sweep.Step = time.Second
	pc.Disk = DiskProbe{Samples: 30, Appends: 100}
	pc.Pings = 30
	pc.Out = filepath.Join(t.TempDir(), "plan")
	pc.Terraform, pc.InfraDir = tf, cfg.InfraDir
	var log bytes.Buffer
	pc.Log = &log
	p, err := Run(ctx, pc)
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, log.String())
	}
	t.Logf("plan over SSH:\n%s", p.Summary())
	m := p.Measured
	if p.Site != "hosts" || len(m.Nodes) != n || m.SharedClock {
		t.Errorf("site %q, %d nodes, shared clock %t; want hosts, %d, not shared", p.Site, len(m.Nodes), m.SharedClock, n)
	}
	if len(m.Disks) != n {
		t.Fatalf("%d disks measured, want one per host (%d)", len(m.Disks), n)
	}
	for i, d := range m.Disks {
		if d.Error != "" || d.Host != inv.Hosts[i].Label(i+1) || d.Writers != 1 || d.SyncsPerS <= 0 || d.Latency.Count != 30 || d.Dir != "/var/lib/redis" {
			t.Errorf("disk %d: %+v; want host %s's /var/lib/redis measured over SSH by one writer", i+1, d, inv.Hosts[i].Label(i+1))
		}
	}
	if len(m.Clocks) != n {
		t.Fatalf("%d clocks read, want %d", len(m.Clocks), n)
	}
	for _, c := range m.Clocks {
		// The module's chrony.conf: maxslewrate 500, makestep 1 1.
		if c.Error != "" || c.Leap == "" || c.MaxSlewPPM != 500 || c.MakeStep != "1 1" {
			t.Errorf("clock of %s: %+v; want chronyc's tracking and the module's maxslewrate 500, makestep 1 1", c.Host, c)
		}
	}
	if !p.Facts.ClockChecked || p.Facts.StepsAfterBoot {
		t.Errorf("facts: clock checked %t, steps after boot %t; want true, false", p.Facts.ClockChecked, p.Facts.StepsAfterBoot)
	}
	if v, _ := p.Rec.Value("drift"); !strings.Contains(v.Measured, "maxslewrate 500 ppm") {
		t.Errorf("drift measured %q; want chrony's maxslewrate 500", v.Measured)
	}
	if v, _ := p.Rec.Value("headroom_disk"); !strings.Contains(v.Measured, "by one writer") {
		t.Errorf("disk headroom measured %q; want the hosts' disks", v.Measured)
	}
	if !strings.Contains(p.TFVarsCheck, "accepted") {
		t.Errorf("tfvars check %q", p.TFVarsCheck)
	}
	if t.Failed() {
		t.Logf("plan log:\n%s", log.String())
	}
}

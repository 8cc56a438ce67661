package plan

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/drill"
	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/internal/testenv"
	"github.com/redlocklab/redlocklab/inventory"
	"github.com/redlocklab/redlocklab/loadgen"
)

// TestPlanOnLab makes two plans on a real lab, as CI does, with a short
// sweep and no verification drills: one for 300/s with the hold time of a
// load run's histogram, one for 50,000/s, which the lab cannot do. It
// checks what they write: plan.json's fields, every value citing a known
// rule and a measurement, a terraform.tfvars that names only variables
// infra/envs/aws declares and that terraform accepts, plan.md's sections,
// plan.html's charts in Chromium, and the Go options, which must compile.
func TestPlanOnLab(t *testing.T) {
	bin, tf := testenv.RequireLab(t, lab.FindTerraform)
	infra := filepath.Join("..", "..", "infra")
	ctx := context.Background()
	sess, err := drill.NewSession(ctx, profile.Default(), drill.Options{Lab: lab.Config{Redlab: bin, Terraform: tf, InfraDir: infra}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close(context.Background()) })
	site, err := LabSite(sess.Lab())
	if err != nil {
		t.Fatal(err)
	}
	hold := holdRun(t, site)

	slo, err := loadgen.ParseThreshold("acquire.p99<10ms")
	if err != nil {
		t.Fatal(err)
	}
	plan := func(rate float64) (*Plan, string, string) {
		cfg := DefaultConfig()
		cfg.Site = site
		cfg.Target = Target{Rate: rate, SLO: []loadgen.Threshold{slo}, Hold: hold}
		cfg.Sweep.Step = time.Second
		// Enough to find a knee above 300/s on a quiet host, and no more:
		// the test checks the plan, not the host.
		cfg.Sweep.MaxRate = 2400
		cfg.Disk = DiskProbe{Samples: 50, Appends: 200}
		cfg.Pings = 50
		cfg.Out = filepath.Join(t.TempDir(), "plan")
		cfg.Command = "redlab plan (test)"
		cfg.Terraform, cfg.InfraDir = tf, infra
		var log bytes.Buffer
		cfg.Log = &log
		start := time.Now()
		p, err := Run(ctx, cfg)
		if err != nil {
			t.Fatalf("plan at %v/s: %v\n%s", rate, err, log.String())
		}
		t.Logf("plan at %v/s in %v: %s", rate, time.Since(start).Round(time.Second), p.Verdict())
		return p, cfg.Out, log.String()
	}

	p, out, log := plan(300)
	back, err := Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if back.Version != Version || back.Site != "lab" || len(back.Nodes) != 5 || back.Target.Rate != 300 || back.Target.Hold.Dist.Count == 0 {
		t.Errorf("plan.json: version %d, site %q, %d nodes, rate %v, %d holds; want %d, lab, 5, 300, the run's holds",
			back.Version, back.Site, len(back.Nodes), back.Target.Rate, back.Target.Hold.Dist.Count, Version)
	}
	m := back.Measured
	for _, n := range m.Nodes {
		if n.RTT.Count != 50 || n.RTT.P99 <= 0 || n.Appendfsync != "always" {
			t.Errorf("node%d: %d round trips, p99 %v ms, appendfsync %q; want 50, > 0, always", n.Node, n.RTT.Count, n.RTT.P99, n.Appendfsync)
		}
	}
	if len(m.Disks) != 1 || m.Disks[0].Error != "" || m.Disks[0].Writers != 5 || m.Disks[0].SyncsPerS <= 0 || m.Disks[0].Latency.Count != 50 {
		t.Errorf("disks: %+v; want the lab's, measured by 5 writers and 50 timed appends", m.Disks)
	}
	if !m.SharedClock || len(m.Clocks) != 1 {
		t.Errorf("clocks: shared %t, %d read; want the lab's one clock", m.SharedClock, len(m.Clocks))
	}
	if len(m.Sweep.Steps) < 3 || m.Sweep.Steps[0].Rate != 75 {
		t.Errorf("sweep steps %+v; want at least 75, 150 and 300/s", m.Sweep.Steps)
	}
	if !m.Sweep.Bounded && !slices.ContainsFunc(back.Rec.Warnings, func(w Warning) bool { return strings.Contains(w.Message, "lower bound") }) {
		t.Error("every step met the SLO, and no warning says the knee is a lower bound")
	}
	for _, s := range m.Sweep.Steps {
		if _, ok := s.CPUBusy[thisMachine]; !ok {
			t.Errorf("step %v/s: no CPU of this machine", s.Rate)
		}
	}
	for _, name := range []string{"persistence", "node_timeout", "drift", "ttl", "backoff", "restart_delay", "nodes", "headroom_knee", "headroom_disk"} {
		v, ok := back.Rec.Value(name)
		if !ok {
			t.Errorf("plan.json has no %s", name)
			continue
		}
		if v.Value == "" || v.Rule == "" || v.Measured == "" || len(v.Sources) == 0 {
			t.Errorf("%s: %+v; want a value, its rule, its sources and its measurement", name, v)
		}
		for _, s := range v.Sources {
			if _, ok := source(s); !ok {
				t.Errorf("%s cites %q, not a known source", name, s)
			}
		}
	}
	if v, _ := back.Rec.Value("ttl"); v.Number < hold.Max.Seconds() {
		t.Errorf("TTL %s shorter than the longest hold %v", v.Value, hold.Max)
	}
	if back.Rec.Meets != (back.Rec.Limit == nil) {
		t.Errorf("meets %t with limit %+v", back.Rec.Meets, back.Rec.Limit)
	}

	// The tfvars: only names envs/aws declares, and terraform accepted them.
	declared, err := declaredVariables(filepath.Join(infra, AWSRoot))
	if err != nil {
		t.Fatal(err)
	}
	names, err := tfvarsNames(filepath.Join(out, TFVarsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 || !slices.Contains(names, "max_lock_ttl") || !slices.Contains(names, "restart_margin") {
		t.Errorf("tfvars names %v; want max_lock_ttl and restart_margin", names)
	}
	for _, n := range names {
		if !slices.Contains(declared, n) {
			t.Errorf("tfvars sets %s, which infra/envs/aws does not declare", n)
		}
	}
	if !strings.Contains(back.TFVarsCheck, "accepted") {
		t.Errorf("tfvars check: %q; want terraform's acceptance", back.TFVarsCheck)
	}

	md, err := os.ReadFile(filepath.Join(out, MarkdownFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Recommendation", "| lock TTL | **" + p.Rec.Values[3].Value, "## Sources", "etcd, Hardware recommendations", "Kubernetes client-go", "Chubby", "the seed article", "redlock.WithNodeTimeout", "max_lock_ttl = "} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("plan.md lacks %q", want)
		}
	}
	dom := dumpDOM(t, filepath.Join(out, HTMLFile))
	if n := strings.Count(dom, "<svg"); n != 4 {
		t.Errorf("plan.html: %d charts, want 4", n)
	}
	for _, want := range []string{"<polyline", "SLO 10ms", "target 300/s", "node timeout " + dur(p.Rec.NodeTimeout), "TTL " + dur(p.Rec.TTL), "etcd's p99 bound 10ms", "tail "} {
		if !strings.Contains(dom, want) {
			t.Errorf("plan.html lacks %q", want)
		}
	}
	compiles(t, p.Options)
	if t.Failed() {
		t.Logf("plan log:\n%s", log)
	}

	// 50,000/s: does not meet, and names the resource that ran out.
	far, _, log := plan(50000)
	if far.Rec.Meets || far.Rec.Limit == nil {
		t.Fatalf("50,000/s on a lab: meets %t; want a \"does not meet\"\n%s", far.Rec.Meets, log)
	}
	if !slices.Contains([]string{ResDisk, ResRoundTrips, ResCPU, ResUnknown}, far.Rec.Limit.Resource) || !strings.Contains(far.Verdict(), "does not meet 50000/s") {
		t.Errorf("verdict %q, limit %+v; want does not meet with a resource", far.Verdict(), far.Rec.Limit)
	}
	if far.Measured.Sweep.Bounded != (far.Measured.Sweep.Knee > 0) && far.Measured.Sweep.Knee > 0 {
		t.Errorf("50,000/s: knee %v not bounded by a miss", far.Measured.Sweep.Knee)
	}
}

// holdRun records a load run with holds on the site's nodes and reads its
// hold histogram back, as --hold-from does.
func holdRun(t *testing.T, s *Site) Hold {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "holds")
	ctx := context.Background()
	rec := loadgen.NewRecorder(len(s.Nodes), 0)
	h := loadgen.HoldSpec{Min: 50 * time.Millisecond, Max: 250 * time.Millisecond}
	target, err := loadgen.NewInventoryTarget(ctx, loadgen.InventoryConfig{
		ReplicaConfig: inventory.ReplicaConfig{Nodes: s.Nodes, Guard: inventory.GuardRedlock, StoreDSN: "sqlite:" + filepath.Join(t.TempDir(), "inv.db"),
			Username: s.Lock.User, Password: s.Lock.Password, TLS: s.TLS},
		Replicas: 1, Recorder: rec, Hold: h, RunID: "holds",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	stages := []loadgen.Stage{{Duration: 2 * time.Second, Rate: 20}}
	sched, err := loadgen.NewSchedule(stages, loadgen.Shard{Index: 0, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := loadgen.NewKeyGen(loadgen.KeySpec{Kind: "uniform", N: 1000}, loadgen.Shard{Index: 0, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadgen.Execute(ctx, loadgen.RunSpec{Out: dir, Meta: loadgen.Meta{Target: "inventory", Guard: "redlock", Nodes: s.Nodes, Stages: loadgen.FormatStages(stages), Keys: "uniform:1000", Quantity: "1"},
		Engine: loadgen.Config{Schedule: sched, Target: target, Keys: keys, Quantity: loadgen.QuantitySpec{Min: 1, Max: 1}, Seed: 1, Recorder: rec}, Stock: 1000}); err != nil {
		t.Fatal(err)
	}
	got, err := HoldFrom(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Dist.Count < 30 || got.Max < 50*time.Millisecond || got.Max > 400*time.Millisecond || !strings.HasSuffix(got.From, "hold.hgrm") {
		t.Fatalf("holds of %v from the run: %+v; want about 40 between 50 and 250 ms", h, got)
	}
	return got
}

// dumpDOM is the page as headless Chromium renders it.
func dumpDOM(t *testing.T, page string) string {
	t.Helper()
	bin := testenv.Require(t, "chromium")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--dump-dom", "file://"+page)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return string(out)
}

// compiles builds the Go options against package redlock, as a user's
// program would.
func compiles(t *testing.T, options string) {
	t.Helper()
	gobin := testenv.Require(t, "go")
	// Under this package, in a directory the go command's ./... skips.
	dir, err := os.MkdirTemp(".", "_options")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	src := "package options\n\nimport (\n\t\"time\"\n\n\t\"github.com/redlocklab/redlocklab/redlock\"\n)\n\n" + options +
		"\nvar (\n\t_ = newLockClient\n\t_ time.Duration = lockTTL\n)\n"
	if err := os.WriteFile(filepath.Join(dir, "options.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gobin, "vet", "./"+filepath.Base(dir))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the Go options do not compile: %v\n%s\n%s", err, out, src)
	}
}

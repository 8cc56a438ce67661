package explore

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/drill/spec"
	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/inventory"
)

func prepared(t *testing.T, mod func(*Config)) *Config {
	t.Helper()
	c := DefaultConfig()
	c.Seed, c.Out = 7, t.TempDir()
	if mod != nil {
		mod(&c)
	}
	if err := c.Prepare(); err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestDrawIsDeterministic: the same seed draws the same schedule, byte
// for byte, whatever was drawn before; another seed another.
func TestDrawIsDeterministic(t *testing.T) {
	a, b := prepared(t, nil), prepared(t, nil)
	for _, i := range []int{0, 5, 41} {
		x, y := a.Draw(i).FrontMatter(), b.Draw(i).FrontMatter()
		if !bytes.Equal(x, y) {
			t.Errorf("schedule %d drawn twice differs:\n%s\n%s", i, x, y)
		}
	}
	// Out of order: schedule 5 alone is what it is after 0..4.
	if !bytes.Equal(prepared(t, nil).Draw(5).FrontMatter(), a.Draw(5).FrontMatter()) {
		t.Error("schedule 5 depends on the schedules drawn before it")
	}
	other := prepared(t, func(c *Config) { c.Seed = 8 })
	if bytes.Equal(other.Draw(0).FrontMatter()[40:], a.Draw(0).FrontMatter()[40:]) {
		t.Error("seeds 7 and 8 drew the same schedule 0")
	}
}

// TestDrawsAreValidAndCover: 300 schedules are valid specs whose faults
// the catalogue accepts, with every family's kinds, one node, minorities
// and majorities, the etcd leader and a lock holder among the targets,
// and nothing of a family switched off.
func TestDrawsAreValidAndCover(t *testing.T) {
	c := prepared(t, nil)
	kinds := map[fault.Kind]bool{}
	sizes := map[int]bool{}
	leader, members := false, false
	for i := range 300 {
		s, err := c.schedule(i)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Faults) < 1 || len(s.Faults) > c.Shape.MaxFaults {
			t.Errorf("schedule %d: %d faults, want 1-%d", i, len(s.Faults), c.Shape.MaxFaults)
		}
		for _, f := range s.Faults {
			kinds[f.Kind] = true
			if f.At < c.Shape.FirstFault || f.At > c.Shape.LastFault {
				t.Errorf("schedule %d: a fault at %v, outside %v-%v", i, f.At, c.Shape.FirstFault, c.Shape.LastFault)
			}
			if f.At+f.For() > c.Shape.Duration-time.Second {
				t.Errorf("schedule %d: %s ends at %v, past a second before the load's end", i, f, f.At+f.For())
			}
			switch {
			case len(f.Nodes) > 0:
				sizes[len(f.Nodes)] = true
			case slices.Contains(f.Etcd, profile.Leader):
				leader = true
			case len(f.Etcd) > 0:
				members = true
			}
		}
	}
	for _, name := range c.Families {
		fam, _ := lookup(name)
		for _, k := range fam.Kinds {
			if !kinds[k] {
				t.Errorf("family %s: kind %s never drawn in 300 schedules", name, k)
			}
		}
	}
	if kinds[fault.Failover] {
		t.Error("failover drawn though its family is off")
	}
	for _, n := range []int{1, 2, 3} {
		if !sizes[n] {
			t.Errorf("no fault on %d of 5 nodes in 300 schedules (one node, minorities and majorities)", n)
		}
	}
	if !leader || !members {
		t.Errorf("etcd targets: leader %v, members %v; want both", leader, members)
	}
	// No fault acts on the server of a node an earlier fault took down
	// and that may not be back.
	for i := range 2000 {
		downUntil := map[int]time.Duration{}
		for _, f := range c.Draw(i).Faults {
			var down time.Duration
			switch f.Kind {
			case fault.Kill, fault.PowerLoss:
				down = c.Lab.RestartDelay
			case fault.Restart:
				down = f.Params["delay"].D
			case fault.Pause:
				down = f.For()
			default:
				continue
			}
			for _, n := range f.Nodes {
				if f.At < downUntil[n] {
					t.Errorf("schedule %d: %s while node %d may still be down", i, f, n)
				}
				downUntil[n] = max(downUntil[n], f.At+down+time.Second)
			}
		}
	}
	// No fault aims at the leader after faults on a majority of the
	// members: there may be no leader left to aim at.
	for i := range 2000 {
		hit, leaders := map[int]bool{}, 0
		for _, f := range c.Draw(i).Faults {
			if slices.Contains(f.Etcd, profile.Leader) && len(hit)+leaders >= c.Lab.Etcd/2+1 {
				t.Errorf("schedule %d: %s after faults on a majority of the etcd members", i, f)
			}
			for _, m := range f.Etcd {
				if m == profile.Leader {
					leaders++
				} else {
					hit[m] = true
				}
			}
		}
	}
	only := prepared(t, func(c *Config) { c.Families = []string{"latency"} })
	for i := range 50 {
		for _, f := range only.Draw(i).Faults {
			if f.Kind != fault.Latency {
				t.Fatalf("--faults latency drew %s", f.Kind)
			}
		}
	}
}

func TestPrepareRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no seed", func(c *Config) { c.Seed = 0 }, "give a seed"},
		{"failover without replicas", func(c *Config) { c.Families = []string{"failover"} }, "failover needs replicas"},
		{"clock on machines", func(c *Config) { c.Target = fault.MachineNode; c.Families = []string{"clock"} }, "cannot be applied on machine node"},
		{"a TTL etcd refuses", func(c *Config) { c.Shape.LockTTL = time.Second }, "etcd"},
		{"a bad lab", func(c *Config) { c.Lab.Replicas = 2 }, "replicas"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Seed, c.Out = 7, t.TempDir()
			tt.mod(&c)
			err := c.Prepare()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error naming %q", err, tt.want)
			}
		})
	}
	c := prepared(t, nil)
	if c.Lab.Etcd != 3 || !c.Lab.PowerLoss {
		t.Errorf("the default search's lab: etcd %d, power-loss filesystem %v; want 3 members for the etcd guards and the filesystem for power", c.Lab.Etcd, c.Lab.PowerLoss)
	}
}

func TestParseFamilies(t *testing.T) {
	got, err := ParseFamilies("crash, power")
	if err != nil || strings.Join(got, ",") != "crash,power" {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "crash,crash", "meteor"} {
		if _, err := ParseFamilies(bad); err == nil {
			t.Errorf("ParseFamilies(%q): want an error", bad)
		}
	}
}

func TestWilsonInterval(t *testing.T) {
	for _, tt := range []struct {
		r      Rate
		lo, hi float64
	}{
		{Rate{K: 0, N: 10}, 0, 0.2775},
		{Rate{K: 10, N: 10}, 0.7225, 1},
		{Rate{K: 5, N: 10}, 0.2366, 0.7634},
		{Rate{K: 3, N: 212}, 0.0048, 0.0408},
	} {
		lo, hi := tt.r.Interval()
		if math.Abs(lo-tt.lo) > 5e-4 || math.Abs(hi-tt.hi) > 5e-4 {
			t.Errorf("%d/%d: got %.4f–%.4f, want %.4f–%.4f", tt.r.K, tt.r.N, lo, hi, tt.lo, tt.hi)
		}
	}
	if lo, hi := (Rate{}).Interval(); lo != 0 || hi != 1 {
		t.Errorf("no schedule: got %g–%g, want 0–1", lo, hi)
	}
}

// TestProperties: what each family implies, given the lab and guards.
func TestProperties(t *testing.T) {
	names := func(c *Config) []string {
		var out []string
		for _, p := range c.Properties() {
			out = append(out, p.Name)
		}
		return out
	}
	latency := prepared(t, func(c *Config) { c.Families = []string{"latency"} })
	if got := names(latency); len(got) != 0 {
		t.Errorf("latency alone implies %v, want nothing", got)
	}
	rules := prepared(t, func(c *Config) { c.Families = []string{"crash", "power"} })
	if got := names(rules); slices.Contains(got, "redis-single breaks") || slices.Contains(got, "redlock breaks") {
		t.Errorf("crash and power under the rules imply %v: no lock may be required to break", got)
	}
	broken := prepared(t, func(c *Config) {
		c.Families = []string{"crash", "power"}
		c.Lab = profile.Profile{Persistence: []profile.Persistence{profile.PersistNone, profile.PersistEverysec, profile.PersistEverysec, profile.PersistEverysec, profile.PersistEverysec}, NoRestartDelay: true}
	})
	got := names(broken)
	for _, want := range []string{"a crash while a lock was held", "redis-single breaks", "redlock breaks", "a quorum lost"} {
		if !slices.Contains(got, want) {
			t.Errorf("crash and power with the rules broken imply %v, want %q among them", got, want)
		}
	}
	o := &Outcome{Guards: map[string]GuardOutcome{"redis-single": {Harms: []Harm{HarmLockViolation}}}}
	for _, p := range broken.Properties() {
		if p.Name == "redis-single breaks" && !p.reached(o) {
			t.Error("a redis-single lock violation does not reach \"redis-single breaks\"")
		}
	}
}

func TestMerge(t *testing.T) {
	c := prepared(t, nil)
	a, b := newResult(c), newResult(c)
	b.Seed = 8
	judged := func(harm bool) *Outcome {
		o := &Outcome{Guards: map[string]GuardOutcome{}}
		for _, g := range c.Guards {
			o.Guards[string(g)] = GuardOutcome{}
		}
		if harm {
			o.Guards[string(inventory.GuardRedlock)] = GuardOutcome{Harms: []Harm{HarmLockViolation}}
		}
		return o
	}
	a.add(judged(true))
	a.add(judged(false))
	b.add(judged(false))
	b.add(&Outcome{Invalid: "busy"})
	a.SearchS, b.SearchS = 60, 60
	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Rates.ByGuard["redlock"][HarmLockViolation]; got != (Rate{K: 1, N: 3}) {
		t.Errorf("merged redlock lock violations: got %+v, want 1 of 3", got)
	}
	if m.Ran != 4 || m.Judged != 3 || m.Invalid != 1 || len(m.Sources) != 2 || m.PerHour != 120 {
		t.Errorf("merged counts: ran %d judged %d invalid %d sources %d per hour %g", m.Ran, m.Judged, m.Invalid, len(m.Sources), m.PerHour)
	}
	other := newResult(prepared(t, func(c *Config) { c.Families = []string{"crash"} }))
	if _, err := Merge(a, other); err == nil {
		t.Error("runs of two configurations merged")
	}
}

// TestShrinkCandidates: each candidate is one step smaller and a valid
// spec.
func TestShrinkCandidates(t *testing.T) {
	c := prepared(t, nil)
	s := c.Draw(0)
	s.Faults = []spec.Fault{
		{At: 2 * time.Second, Kind: fault.Partition, Nodes: []int{1, 2, 3}, Params: fault.Params{fault.For: {D: 2 * time.Second}}},
		{At: 4 * time.Second, Kind: fault.Kill, Nodes: []int{4}, Params: fault.Params{}},
	}
	cands := candidates(s, inventory.GuardRedlock)
	var guardsOnly, fewer, shorter, narrower, moved bool
	for _, cand := range cands {
		if _, err := spec.Parse(cand.Name+".md", spec.Format(cand, "")); err != nil {
			t.Errorf("candidate is not a valid spec: %v", err)
		}
		switch {
		case len(cand.Workload.Guards) == 1:
			guardsOnly = true
		case len(cand.Faults) == 1:
			fewer = true
		case cand.Faults[0].For() == time.Second:
			shorter = true
		case len(cand.Faults[0].Nodes) == 2:
			narrower = true
		case cand.Faults[1].At == 2*time.Second:
			moved = true
		}
	}
	if !guardsOnly || !fewer || !shorter || !narrower || !moved {
		t.Errorf("candidates: one guard %v, a fault fewer %v, shorter %v, a node fewer %v, moved %v; want all", guardsOnly, fewer, shorter, narrower, moved)
	}
	if len(s.Faults) != 2 || len(s.Faults[0].Nodes) != 3 {
		t.Error("making candidates changed the schedule")
	}
}

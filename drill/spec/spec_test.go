package spec

import (
	"errors"
	"github.com/redlocklab/redlocklab/infra/fault"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/infra/lab"
	"github.com/redlocklab/redlocklab/inventory"
)

const goodSpec = `---
drill: power-loss-everysec-no-delay
title: three nodes lose power under everysec and restart at once
lab: {nodes: 5, persistence: everysec, restart_delay: 0s}
workload: {guards: [redlock, redlock-fenced, db-atomic], rate: 50, duration: 40s,
           keys: uniform:20, hold: 2s, lock_ttl: 10s, seed: 7}
faults:
  - {at: 10s, fault: power-loss, nodes: [3, 4, 5]}
expect:
  redlock: ["safety.lock_violations>0"]
  redlock-fenced: ["safety.lost_updates==0", "safety.oversell==0"]
  db-atomic: ["safety.lost_updates==0", "during.outcomes.unavailable<1%", "after.grants>=0"]
---

# Power loss under everysec

The body is for people.
`

func TestParseGood(t *testing.T) {
	s, err := Parse("runbooks/drills/power-loss-everysec-no-delay.md", []byte(goodSpec))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "power-loss-everysec-no-delay" {
		t.Errorf("name: got %q", s.Name)
	}
	if s.Lab.Nodes != 5 || s.Lab.RestartDelay != 0 || len(s.Lab.Persistence) != 5 || s.Lab.Persistence[4] != lab.PersistEverysec {
		t.Errorf("lab: got %+v", s.Lab)
	}
	w := s.Workload
	if len(w.Guards) != 3 || w.Rate != 50 || w.Duration != 40*time.Second || w.Keys.N != 20 || w.Hold.Min != 2*time.Second ||
		w.LockTTL != 10*time.Second || w.Seed != 7 || w.Replicas != DefaultReplicas {
		t.Errorf("workload: got %+v", w)
	}
	if len(s.Faults) != 1 || s.Faults[0].Kind != fault.PowerLoss || s.Faults[0].At != 10*time.Second || len(s.Faults[0].Nodes) != 3 || s.Faults[0].Line != 8 {
		t.Errorf("faults: got %+v", s.Faults)
	}
	x := s.Expect[inventory.GuardDBAtomic]
	if len(x) != 3 || x[1].Phase != PhaseDuring || x[2].Phase != PhaseAfter || !x[2].Grants || x[0].Line != 12 {
		t.Errorf("db-atomic expectations: got %+v", x)
	}
}

func TestParsePerNodePersistence(t *testing.T) {
	spec := strings.Replace(goodSpec, "persistence: everysec", "persistence: [always, always, everysec, everysec, none]", 1)
	s, err := Parse("power-loss-everysec-no-delay.md", []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	want := []lab.Persistence{"always", "always", "everysec", "everysec", "none"}
	for i, p := range want {
		if s.Lab.Persistence[i] != p {
			t.Errorf("node %d: got %s, want %s", i+1, s.Lab.Persistence[i], p)
		}
	}
}

// TestParseErrors: every spec error names the file, the line and the field,
// before anything runs.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name     string
		from, to string // replace in goodSpec
		wantLine int
		want     string // in the message
	}{
		{"unknown fault", "fault: power-loss", "fault: meteor", 8, "faults[0].fault: unknown fault \"meteor\""},
		{"node out of range", "nodes: [3, 4, 5]", "nodes: [3, 4, 6]", 8, "faults[0].nodes: node 6 is out of range: the lab has nodes 1-5"},
		{"bad duration", "at: 10s", "at: ten", 8, "faults[0].at: want a duration like 10s or 500ms, got \"ten\""},
		{"fault after the end", "at: 10s", "at: 45s", 8, "faults[0].at: 45s is not before the end of the load"},
		{"unknown guard", "guards: [redlock, redlock-fenced, db-atomic]", "guards: [redlock, zookeeper]", 5, "workload.guards[1]: unknown guard \"zookeeper\""},
		{"unknown metric", "safety.lock_violations>0", "safety.deadlocks>0", 10, "expect.redlock[0]: threshold \"safety.deadlocks>0\": unknown safety metric"},
		{"metric node out of range", "safety.lock_violations>0", "node7.p99<5ms", 10, "node7 is out of range"},
		{"phase on safety", "safety.lock_violations>0", "during.safety.lock_violations>0", 10, "safety counts are judged on the whole drill"},
		{"expect unknown guard", "  db-atomic: [", "  none: [", 12, "expect.none: not a guard of this drill's workload"},
		{"unknown field", "lock_ttl: 10s", "lock_tll: 10s", 6, "workload.lock_tll: unknown field"},
		{"bad persistence", "persistence: everysec", "persistence: sometimes", 4, "lab.persistence: want always, everysec, no-fsync or none, got \"sometimes\""},
		{"persistence count", "persistence: everysec", "persistence: [always, everysec]", 4, "one per node (5), got 2"},
		{"power-loss without nodes", "{at: 10s, fault: power-loss, nodes: [3, 4, 5]}", "{at: 10s, fault: power-loss}", 8, "power-loss needs the nodes it acts on"},
		{"client-pause without for", "{at: 10s, fault: power-loss, nodes: [3, 4, 5]}", "{at: 10s, fault: client-pause}", 8, "faults[0].for: client-pause needs for (like 15s)"},
		{"param of another fault", "nodes: [3, 4, 5]}", "nodes: [3, 4, 5], by: 3s}", 8, "power-loss takes no by"},
		{"name mismatch", "drill: power-loss-everysec-no-delay", "drill: other-drill", 2, "does not match the file name"},
		{"rate missing", "rate: 50, ", "", 5, "workload.rate: missing"},
		{"bad YAML", "faults:\n", "faults: [\n", 9, "YAML"},
		{"no front matter", "---\ndrill:", "drill:", 1, "no front matter"},
		{"failover without replicas", "fault: power-loss, nodes", "fault: failover, nodes", 8, "faults[0].fault: failover promotes a node's replica: the lab needs replicas"},
		{"lag on another fault", "nodes: [3, 4, 5]}", "nodes: [3, 4, 5], lag: 2s}", 8, "power-loss takes no lag (it applies to failover)"},
		{"two replicas", "restart_delay: 0s}", "restart_delay: 0s, replicas: 2}", 4, "lab.replicas: want a whole number from 0 to 1, got \"2\""},
		{"machines not a bool", "restart_delay: 0s}", "restart_delay: 0s, machines: yes}", 4, "lab.machines: want true or false, got \"yes\""},
		{"machines with replicas", "restart_delay: 0s}", "restart_delay: 0s, machines: true, replicas: 1}", 4, "lab.machines: machines and replicas do not go together"},
		{"tls with replicas", "restart_delay: 0s}", "restart_delay: 0s, tls: true, replicas: 1}", 4, "lab.tls: TLS goes with independent process nodes only"},
		{"tls not a boolean", "restart_delay: 0s}", "restart_delay: 0s, tls: maybe}", 4, "lab.tls: want true or false, got \"maybe\""},
		{"bad node timeout", "lock_ttl: 10s,", "lock_ttl: 10s, node_timeout: fast,", 6, "workload.node_timeout: want a duration of at least 1ms, like 50ms, or default, got \"fast\""},
		{"guard option for an unknown guard", "lock_ttl: 10s,", "lock_ttl: 10s, guard_options: {zookeeper: {node_timeout: default}},", 6, "workload.guard_options.zookeeper: unknown guard"},
		{"guard option for a guard not in the workload", "lock_ttl: 10s,", "lock_ttl: 10s, guard_options: {redsync: {node_timeout: default}},", 6, "workload.guard_options.redsync: guard redsync is not in workload.guards"},
		{"unknown guard option", "lock_ttl: 10s,", "lock_ttl: 10s, guard_options: {redlock: {pool: 3}},", 6, "workload.guard_options.redlock.pool: unknown field (want one of node_timeout)"},
		{"bad guard node timeout", "lock_ttl: 10s,", "lock_ttl: 10s, guard_options: {redlock: {node_timeout: 0s}},", 6, "workload.guard_options.redlock.node_timeout: want a duration of at least 1ms"},
		{"bad window", "faults:\n", "windows: {slow: 10s}\nfaults:\n", 7, "windows.slow: want FROM-TO, like 10s-20s, got \"10s\""},
		{"window backwards", "faults:\n", "windows: {slow: 20s-10s}\nfaults:\n", 7, "windows.slow: want FROM before TO"},
		{"window past the end", "faults:\n", "windows: {slow: 30s-50s}\nfaults:\n", 7, "windows.slow: 50s is past the end of the load (duration 40s)"},
		{"window named like a phase", "faults:\n", "windows: {during: 10s-20s}\nfaults:\n", 7, "windows.during: \"during\" is a phase or a metric's name"},
		{"window named like a metric", "faults:\n", "windows: {acquire: 10s-20s}\nfaults:\n", 7, "a phase or a metric's name"},
		{"window named like a node", "faults:\n", "windows: {node2: 10s-20s}\nfaults:\n", 7, "a phase or a metric's name"},
		{"window with a bad name", "faults:\n", "windows: {Slow-Part: 10s-20s}\nfaults:\n", 7, "a window's name is lowercase letters"},
		{"expectation in an unknown window", "safety.lock_violations>0", "slow.acquire.p99<5ms", 10, "expect.redlock[0]"},
		{"unknown pause scope", "{at: 10s, fault: power-loss, nodes: [3, 4, 5]}", "{at: 10s, fault: client-pause, for: 5s, scope: thread}", 8, "faults[0].scope: unknown scope \"thread\" (want request, process"},
		{"scope of another fault", "nodes: [3, 4, 5]}", "nodes: [3, 4, 5], scope: process}", 8, "power-loss takes no scope (it applies to client-pause)"},
		{"process scope with a hold", "{at: 10s, fault: power-loss, nodes: [3, 4, 5]}", "{at: 10s, fault: client-pause, for: 5s, scope: process}", 8, "faults[0].scope: scope process runs the guards as `redlab serve` processes, which have no workload hold"},
		{"process pause too long", "{at: 10s, fault: power-loss, nodes: [3, 4, 5]}", "{at: 10s, fault: client-pause, for: 31s, scope: process}", 8, "faults[0].scope: scope process pauses a serve process for at most 30s"},
		{"one guard in two scopes", "{at: 10s, fault: power-loss, nodes: [3, 4, 5]}", "{at: 10s, fault: client-pause, for: 5s}\n  - {at: 20s, fault: client-pause, for: 5s, scope: process, guards: [db-atomic]}", 8, "faults[0].scope: guard db-atomic is paused with scope request here and with scope process at line 9"},
		{"comparison guard is a workload guard", "guards: [redlock, redlock-fenced, db-atomic]", "guards: [redlock, redlock-fenced, db-atomic, redlock-del, dynamo]", 5, "workload.guards[4]: unknown guard \"dynamo\" (want one of " + inventory.JoinGuards(append(inventory.Guards(), inventory.Comparisons()...)) + ")"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := strings.Replace(goodSpec, tt.from, tt.to, 1)
			if spec == goodSpec {
				t.Fatalf("replacement %q not found", tt.from)
			}
			wantSpecError(t, "runbooks/drills/power-loss-everysec-no-delay.md", spec, tt.wantLine, tt.want)
		})
	}
}

// wantSpecError parses spec as file and checks that it fails with a
// *Error (an ErrInvalid) at line whose message contains want.
func wantSpecError(t *testing.T, file, spec string, line int, want string) {
	t.Helper()
	_, err := Parse(file, []byte(spec))
	if err == nil {
		t.Fatal("got no error")
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("got %v, want an ErrInvalid", err)
	}
	var se *Error
	if !errors.As(err, &se) {
		t.Fatalf("got %T, want *Error", err)
	}
	if se.File != file || se.Line != line {
		t.Errorf("position: got %s:%d, want line %d (%v)", se.File, se.Line, line, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("message: got %q, want it to contain %q", err, want)
	}
}

// mistakesSpec uses what the common-mistakes drills need: a replicated
// lab, failover with lag, a comparison guard, redsync with go-redis's own
// timeouts, and named windows.
const mistakesSpec = `---
drill: mistakes
lab: {nodes: 5, replicas: 1, restart_delay: 15s}
workload: {guards: [redlock, redlock-del, redsync], rate: 10, duration: 30s,
           node_timeout: 50ms,
           guard_options: {redsync: {node_timeout: default}, redlock-del: {node_timeout: 250ms}}}
faults:
  - {at: 10s, fault: failover, nodes: [1, 2, 3], lag: 3s}
windows: {healthy: 2s-10s, slow: 12s-20s}
expect:
  redlock: ["slow.acquire.p99<=2*healthy.acquire.p99", "healthy.grants>0"]
  redlock-del: ["safety.lock_violations>0"]
  redsync: ["slow.acquire.p50>=3s", "during.acquire.p99<=2*slow.acquire.p99"]
---
`

func TestParseMistakes(t *testing.T) {
	s, err := Parse("mistakes.md", []byte(mistakesSpec))
	if err != nil {
		t.Fatal(err)
	}
	if s.Lab.Replicas != 1 || s.Lab.RestartDelay != 15*time.Second {
		t.Errorf("lab: got %+v, want replicas 1", s.Lab)
	}
	if f := s.Faults[0]; f.Kind != fault.Failover || f.Params.D("lag") != 3*time.Second || len(f.Nodes) != 3 {
		t.Errorf("fault: got %+v, want a failover of 3 nodes with 3s of lag", f)
	}
	w := s.Workload
	for g, want := range map[inventory.Guard]time.Duration{
		inventory.GuardRedlock: 50 * time.Millisecond, inventory.GuardRedsync: 0, inventory.GuardRedlockDel: 250 * time.Millisecond,
	} {
		if got := w.NodeTimeoutOf(g); got != want {
			t.Errorf("node timeout of %s: got %v, want %v", g, got, want)
		}
	}
	if len(s.Windows) != 2 || s.Windows[1] != (Window{Name: "slow", From: 12 * time.Second, To: 20 * time.Second, Line: 9}) {
		t.Errorf("windows: got %+v", s.Windows)
	}
	x := s.Expect[inventory.GuardRedlock]
	if x[0].Phase != "slow" || x[0].Refs != "healthy" || x[0].Factor != 2 || x[1].Phase != "healthy" || !x[1].Grants {
		t.Errorf("redlock expectations: got %+v", x)
	}
	if y := s.Expect[inventory.GuardRedsync]; y[1].Phase != PhaseDuring || y[1].Refs != "slow" {
		t.Errorf("redsync expectations: got %+v", y)
	}
	// A window takes no safety count, like a phase.
	bad := strings.Replace(mistakesSpec, `"healthy.grants>0"`, `"slow.safety.double_grants==0"`, 1)
	if _, err := Parse("mistakes.md", []byte(bad)); err == nil || !strings.Contains(err.Error(), "safety counts are judged on the whole drill") {
		t.Errorf("safety count in a window: got %v", err)
	}
}

func TestParseExpectation(t *testing.T) {
	tests := []struct {
		expr   string
		phase  Phase
		grants bool
		ok     bool
	}{
		{"safety.lock_violations>0", PhaseAll, false, true},
		{"during.outcomes.unavailable<1%", PhaseDuring, false, true},
		{"after.acquire.p99<10ms", PhaseAfter, false, true},
		{"before.acquire.p99<10ms", PhaseBefore, false, true},
		{"during.grants==0", PhaseDuring, true, true},
		{"grants==0", PhaseAll, false, false}, // grants needs a phase
		{"during.grants~0", PhaseDuring, true, false},
		{"node5.p99<5ms", PhaseAll, false, true},
		{"node6.p99<5ms", PhaseAll, false, false},
		{"recovery<2s", PhaseAll, false, true},
		{"recovery<2", PhaseAll, false, false},
		{"during.recovery<2s", PhaseDuring, false, false},
		{"during.acquire.p99<=2*before.acquire.p99", PhaseDuring, false, true},
		{"during.acquire.p99<=2*acquire.p999", PhaseDuring, false, true},
		{"during.acquire.p99<=2*before.bogus.p99", PhaseDuring, false, false},
		{"during.safety.lost_updates<=2*before.safety.lost_updates", PhaseDuring, false, false},
	}
	for _, tt := range tests {
		x, err := ParseExpectation(tt.expr, 5)
		if (err == nil) != tt.ok {
			t.Errorf("%s: got error %v, want ok=%v", tt.expr, err, tt.ok)
			continue
		}
		if err == nil && (x.Phase != tt.phase || x.Grants != tt.grants) {
			t.Errorf("%s: got phase %q grants %v, want %q %v", tt.expr, x.Phase, x.Grants, tt.phase, tt.grants)
		}
	}
}

// TestShippedSpecsParse: every runbook under runbooks/drills is a valid spec.
// TestShippedMachineSpecsParse reads the drills written for a lab of
// machines (runbooks/machines): every one asks for machines.
func TestShippedMachineSpecsParse(t *testing.T) {
	files, err := filepath.Glob("../../runbooks/machines/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no drill runbooks in runbooks/machines")
	}
	for _, f := range files {
		s, err := ReadFile(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if !s.Lab.Machines {
			t.Errorf("%s: lab.machines is not true", f)
		}
	}
}

func TestShippedSpecsParse(t *testing.T) {
	files, err := filepath.Glob("../../runbooks/drills/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 17 {
		t.Fatalf("got %d drill runbooks, want at least 17", len(files))
	}
	for _, f := range files {
		s, err := ReadFile(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		for _, g := range s.Workload.Guards {
			if len(s.Expect[g]) == 0 {
				t.Errorf("%s: guard %s has no expectation", f, g)
			}
		}
	}
}

func TestParseTLS(t *testing.T) {
	s, err := Parse("runbooks/drills/power-loss-everysec-no-delay.md", []byte(strings.Replace(goodSpec, "restart_delay: 0s}", "restart_delay: 0s, tls: true}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Lab.TLS {
		t.Errorf("lab: got %+v, want tls", s.Lab)
	}
	if s, err = Parse("runbooks/drills/power-loss-everysec-no-delay.md", []byte(goodSpec)); err != nil || s.Lab.TLS {
		t.Errorf("without tls: lab %+v, %v; want plain", s.Lab, err)
	}
}

func TestParseMachines(t *testing.T) {
	onMachines := strings.Replace(goodSpec, "restart_delay: 0s}", "restart_delay: 0s, machines: true}", 1)
	s, err := Parse("runbooks/drills/power-loss-everysec-no-delay.md", []byte(onMachines))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Lab.Machines {
		t.Errorf("lab: got %+v, want machines", s.Lab)
	}
	if err := CheckMachines(s); err != nil {
		t.Errorf("CheckMachines of a power-loss drill: %v", err)
	}
	for name, fault := range map[string]string{
		"clock-jump":         "{at: 10s, fault: clock-jump, nodes: [3], by: 5s}",
		"clock-rate":         "{at: 10s, fault: clock-rate, nodes: [3], factor: 2, for: 5s}",
		"restart with delay": "{at: 10s, fault: restart, nodes: [3], delay: 2s}",
	} {
		spec := strings.Replace(goodSpec, "{at: 10s, fault: power-loss, nodes: [3, 4, 5]}", fault, 1)
		s, err := Parse("runbooks/drills/power-loss-everysec-no-delay.md", []byte(spec))
		if err != nil {
			t.Fatalf("%s on processes: %v", name, err)
		}
		if err := CheckMachines(s); err == nil {
			t.Errorf("%s: CheckMachines accepted it, want it refused before the lab is up", name)
		}
		_, err = Parse("runbooks/drills/power-loss-everysec-no-delay.md", []byte(strings.Replace(spec, "restart_delay: 0s}", "restart_delay: 0s, machines: true}", 1)))
		var se *Error
		if !errors.As(err, &se) || se.Line != 8 || se.Field != "faults[0].fault" {
			t.Errorf("%s with machines: true: got %v, want a spec error on faults[0].fault, line 8", name, err)
		}
	}
	restartNow := strings.Replace(goodSpec, "{at: 10s, fault: power-loss, nodes: [3, 4, 5]}", "{at: 10s, fault: restart, nodes: [3], delay: 0s}", 1)
	s, err = Parse("runbooks/drills/power-loss-everysec-no-delay.md", []byte(restartNow))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckMachines(s); err != nil {
		t.Errorf("restart at once on machines: %v, want accepted (systemctl restart)", err)
	}
}

const pauseSpec = `---
drill: client-pause
lab: {nodes: 5}
workload: {guards: [redlock, redlock-fenced, db-atomic], rate: 20, duration: 30s, lock_ttl: 10s}
faults:
  - {at: 4s, fault: client-pause, for: 15s, SCOPE}
expect:
  redlock: ["safety.double_grants>0"]
---
`

func TestParsePauseScope(t *testing.T) {
	tests := []struct {
		name, scope string
		want        inventory.PauseScope
		procs       []inventory.Guard
	}{
		{"default", "count: 1", inventory.ScopeRequest, nil},
		{"request", "scope: request", inventory.ScopeRequest, nil},
		{"process", "scope: process", inventory.ScopeProcess, []inventory.Guard{inventory.GuardRedlock, inventory.GuardRedlockFenced, inventory.GuardDBAtomic}},
		{"process for one guard", "scope: process, guards: [redlock-fenced]", inventory.ScopeProcess, []inventory.Guard{inventory.GuardRedlockFenced}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse("client-pause.md", []byte(strings.Replace(pauseSpec, "SCOPE", tt.scope, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Faults[0].Scope; got != tt.want {
				t.Errorf("scope: got %q, want %q", got, tt.want)
			}
			if got := s.ProcessGuards(); inventory.JoinGuards(got) != inventory.JoinGuards(tt.procs) {
				t.Errorf("guards run as processes: got %v, want %v", got, tt.procs)
			}
			if got := s.Faults[0].String(); !strings.Contains(got, "(scope "+string(tt.want)+")") {
				t.Errorf("description %q does not name scope %s", got, tt.want)
			}
		})
	}
	// A service never runs a comparison guard, so scope process cannot.
	spec := strings.Replace(pauseSpec, "SCOPE", "scope: process", 1)
	spec = strings.Replace(spec, "db-atomic]", "db-atomic, redlock-del]", 1)
	_, err := Parse("client-pause.md", []byte(spec))
	var se *Error
	if !errors.As(err, &se) || se.Line != 6 || se.Field != "faults[0].scope" || !strings.Contains(se.Msg, "never runs a comparison guard") {
		t.Errorf("process scope over redlock-del: got %v, want a SpecError at line 6, faults[0].scope, about comparison guards", err)
	}
}

package spec

import (
	"reflect"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/infra/lab/profile"
	"github.com/redlocklab/redlocklab/inventory"
)

const etcdSpec = `---
drill: etcd-spec
lab: {nodes: 5, etcd: 3}
workload: {guards: [etcd, etcd-fenced, redlock], rate: 20, duration: 30s,
           keys: uniform:1000, lock_ttl: 5s}
faults:
  - {at: 8s, fault: kill, etcd: leader}
  - {at: 16s, fault: partition, etcd: [2, 3], for: 4s}
  - {at: 22s, fault: kill, nodes: [1]}
expect:
  etcd: ["safety.lock_violations==0"]
  etcd-fenced: ["safety.lock_violations==0"]
  redlock: ["safety.lock_violations==0"]
---
`

func TestEtcdSpecParse(t *testing.T) {
	s, err := Parse("etcd-spec.md", []byte(etcdSpec))
	if err != nil {
		t.Fatal(err)
	}
	if s.Lab.Etcd != 3 || s.Lab.EtcdUnsafeNoFsync {
		t.Errorf("lab.etcd: got %d, unsafe-no-fsync %v; want 3 with fsync", s.Lab.Etcd, s.Lab.EtcdUnsafeNoFsync)
	}
	noFsync, err := Parse("etcd-spec.md", []byte(strings.Replace(etcdSpec, "etcd: 3}", "etcd: 3, etcd_unsafe_no_fsync: true}", 1)))
	if err != nil || !noFsync.Lab.EtcdUnsafeNoFsync {
		t.Errorf("lab.etcd_unsafe_no_fsync: true: got %v (%v), want the negative control declared", noFsync != nil && noFsync.Lab.EtcdUnsafeNoFsync, err)
	}
	want := [][]int{{profile.Leader}, {2, 3}, nil}
	for i, f := range s.Faults {
		if !reflect.DeepEqual(f.Etcd, want[i]) {
			t.Errorf("faults[%d].etcd: got %v, want %v", i, f.Etcd, want[i])
		}
	}
	if s.Faults[2].Nodes[0] != 1 {
		t.Errorf("faults[2].nodes: got %v", s.Faults[2].Nodes)
	}
	for i, d := range []string{"kill etcd leader", "partition etcd members 2,3 for 4s", "kill node 1"} {
		if got := s.Faults[i].String(); got != d {
			t.Errorf("describeFault(faults[%d]): got %q, want %q", i, got, d)
		}
	}
}

func TestEtcdSpecErrors(t *testing.T) {
	tests := []struct {
		name     string
		from, to string // replace in etcdSpec
		wantLine int
		want     string
	}{
		{"etcd guards without lab etcd", "lab: {nodes: 5, etcd: 3}", "lab: {nodes: 5}", 4, "workload.guards[0]: guard etcd locks on etcd: the lab needs etcd members"},
		{"even member count", "etcd: 3}", "etcd: 2}", 3, "lab.etcd: want 0 (none), 1, 3 or 5 etcd members"},
		{"too many members", "etcd: 3}", "etcd: 7}", 3, "lab.etcd: want a whole number from 0 to 5"},
		{"nodes and etcd", "fault: kill, etcd: leader}", "fault: kill, etcd: leader, nodes: [1]}", 7, "faults[0].nodes: a fault acts on Redis nodes or on etcd members"},
		{"kind a member cannot have", "fault: kill, etcd: leader}", "fault: clock-jump, by: 1s, etcd: leader}", 7, "faults[0].etcd: clock-jump does not apply to etcd members (they take kill, power-loss, restart, stop, start, pause, partition, heal, latency)"},
		{"client-pause on etcd", "fault: kill, etcd: leader}", "fault: client-pause, etcd: leader, for: 2s}", 7, "client-pause does not apply to etcd members"},
		{"member out of range", "etcd: [2, 3]", "etcd: [2, 4]", 8, "faults[1].etcd: etcd member 4 is out of range: the lab has members 1-3"},
		{"member zero", "etcd: [2, 3]", "etcd: [0, 3]", 8, "faults[1].etcd[0]: want leader or a member number from 1 to 5, got \"0\""},
		{"leader twice", "etcd: [2, 3]", "etcd: [leader, leader]", 8, "etcd member leader listed twice"},
		{"etcd faults without lab etcd", "guards: [etcd, etcd-fenced, redlock]", "guards: [redlock]", 7, "faults[0].etcd: the lab has no etcd members"},
		{"ttl below etcd's minimum", "lock_ttl: 5s", "lock_ttl: 1s", 4, "workload.lock_ttl: guard etcd: lock TTL 1s is below etcd's minimum lease TTL of 2s"},
		{"ttl not whole seconds", "lock_ttl: 5s", "lock_ttl: 2500ms", 4, "workload.lock_ttl: guard etcd: etcd leases are whole seconds: give 2s or 3s"},
		{"etcd on machines", "etcd: 3}", "etcd: 3, machines: true}", 3, "lab.etcd: etcd members run next to process nodes only"},
		{"no fsync without members", "etcd: 3}", "etcd: 0, etcd_unsafe_no_fsync: true}", 3, "lab.etcd_unsafe_no_fsync: the lab has no etcd members"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := strings.Replace(etcdSpec, tt.from, tt.to, 1)
			if spec == etcdSpec {
				t.Fatalf("replacement %q not found", tt.from)
			}
			if tt.name == "etcd faults without lab etcd" {
				spec = strings.Replace(spec, "lab: {nodes: 5, etcd: 3}", "lab: {nodes: 5}", 1)
				spec = strings.Replace(spec, "  etcd: [\"safety.lock_violations==0\"]\n  etcd-fenced: [\"safety.lock_violations==0\"]\n", "", 1)
			}
			wantSpecError(t, "etcd-spec.md", spec, tt.wantLine, tt.want)
		})
	}
}

// TestWithoutEtcd: a spec whose etcd members run beside a fault of the
// Redis nodes loses them, their guards and the twins of its faults on them
// (and so runs on machines); one whose faults are all on etcd members is
// about etcd, and stays as it is (refused on machines).
func TestWithoutEtcd(t *testing.T) {
	const twins = `---
drill: twins
lab: {nodes: 5, persistence: always, restart_delay: 0s, etcd: 3}
workload: {guards: [redlock, etcd, db-atomic], rate: 10, duration: 20s, lock_ttl: 10s}
faults:
  - {at: 2s, fault: power-loss, nodes: [3, 4, 5]}
  - {at: 2s, fault: power-loss, etcd: [2, 3]}
expect:
  redlock: ["safety.lock_violations==0"]
  etcd: ["safety.lock_violations==0"]
---
`
	s, err := Parse("twins.md", []byte(twins))
	if err != nil {
		t.Fatal(err)
	}
	out, left, ok := s.WithoutEtcd()
	if !ok || out.Lab.Etcd != 0 || len(out.Faults) != 1 || len(out.Faults[0].Etcd) != 0 ||
		len(left) != 1 || left[0] != inventory.GuardEtcd || len(out.Workload.Guards) != 2 || out.Expect[inventory.GuardEtcd] != nil {
		t.Errorf("got ok %v, lab etcd %d, faults %v, left out %v, guards %v; want the power loss of the nodes alone, etcd left out",
			ok, out.Lab.Etcd, out.Faults, left, out.Workload.Guards)
	}
	if len(s.Faults) != 2 || s.Lab.Etcd != 3 {
		t.Errorf("the spec itself changed: %d faults, %d members", len(s.Faults), s.Lab.Etcd)
	}
	if err := CheckMachines(s); err != nil {
		t.Errorf("CheckMachines: %v, want it to run on machines without its etcd members", err)
	}

	about := strings.Replace(strings.Replace(twins, "  - {at: 2s, fault: power-loss, nodes: [3, 4, 5]}\n", "", 1), "drill: twins", "drill: about", 1)
	s, err = Parse("about.md", []byte(about))
	if err != nil {
		t.Fatal(err)
	}
	if out, left, ok := s.WithoutEtcd(); ok || out != s || left != nil {
		t.Errorf("a spec about etcd: got ok %v, left out %v; want it unchanged and not ok", ok, left)
	}
	if err := CheckMachines(s); err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Errorf("CheckMachines of a spec about etcd: got %v, want the etcd members refused", err)
	}
}

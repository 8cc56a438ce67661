package spec

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/inventory"
)

// reachSpec is a drill with the given lab, workload line and faults.
func reachSpec(t *testing.T, lab, workload string, faults ...string) *Spec {
	t.Helper()
	text := fmt.Sprintf("---\ndrill: reach\nlab: %s\nworkload: %s\n", lab, workload)
	if len(faults) > 0 {
		text += "faults:\n"
		for _, f := range faults {
			text += "  - " + f + "\n"
		}
	}
	text += "expect:\n  redlock: [\"safety.lock_violations==0\"]\n---\n"
	s, err := Parse("reach.md", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestReach(t *testing.T) {
	const (
		etcdLab = "{nodes: 5, etcd: 3}"
		quiet   = "{guards: [redlock], rate: 10, duration: 30s, keys: uniform:1000, lock_ttl: 10s}"
	)
	type want map[inventory.Guard]Reach
	for _, tc := range []struct {
		name     string
		lab, wl  string
		faults   []string
		want     want
		inactive []inventory.Guard
	}{
		{
			name: "a Redis node killed: the Redis locks are reached; etcd and db-atomic are controls",
			lab:  etcdLab, wl: quiet, faults: []string{"{at: 10s, fault: kill, nodes: [2]}"},
			want: want{
				inventory.GuardRedlock: {By: RedisNodes}, inventory.GuardNodeRedlock: {By: RedisNodes}, inventory.GuardRedisSingle: {By: RedisNodes},
				inventory.GuardEtcd: {Control: RedisNodes}, inventory.GuardDBAtomic: {Control: RedisNodes},
			},
			inactive: []inventory.Guard{inventory.GuardDBVersion, inventory.GuardDBForUpdate, inventory.GuardRedlockDel, inventory.GuardNone},
		},
		{
			name: "the same on an etcd member too: etcd is reached",
			lab:  etcdLab, wl: quiet, faults: []string{"{at: 10s, fault: kill, nodes: [2]}", "{at: 10s, fault: kill, etcd: [2]}"},
			want: want{inventory.GuardRedlock: {By: RedisNodes}, inventory.GuardEtcdFenced: {By: EtcdMembers, Control: RedisNodes}},
		},
		{
			name: "only etcd members: the Redis locks cannot be reached",
			lab:  etcdLab, wl: quiet, faults: []string{"{at: 8s, fault: kill, etcd: leader}"},
			want:     want{inventory.GuardEtcd: {By: EtcdMembers}},
			inactive: []inventory.Guard{inventory.GuardRedlock, inventory.GuardDBAtomic},
		},
		{
			name: "a process pause of every guard: every service guard, no comparison",
			lab:  "{nodes: 5}", wl: quiet, faults: []string{"{at: 4s, fault: client-pause, for: 15s, scope: process}"},
			want: want{
				inventory.GuardRedlock: {By: PausedHolder}, inventory.GuardDBVersion: {By: PausedHolder},
				inventory.GuardDBAtomic: {By: PausedHolder}, inventory.GuardEtcd: {By: PausedHolder},
			},
			inactive: []inventory.Guard{inventory.GuardRedlockDel, inventory.GuardNodeRedlockDel},
		},
		{
			name: "a request pause longer than the TTL, with holds: the comparisons too",
			lab:  "{nodes: 5}", wl: "{guards: [redlock], rate: 10, duration: 30s, keys: uniform:4, hold: 1s, lock_ttl: 10s}",
			faults: []string{"{at: 4s, fault: client-pause, for: 15s}"},
			want:   want{inventory.GuardRedlockDel: {By: OutlivedHolder}, inventory.GuardRedlock: {By: PausedHolder}},
		},
		{
			name: "the same without a hold: a late release meets no holder to free",
			lab:  "{nodes: 5}", wl: quiet, faults: []string{"{at: 4s, fault: client-pause, for: 15s}"},
			want:     want{inventory.GuardRedlock: {By: PausedHolder}},
			inactive: []inventory.Guard{inventory.GuardRedlockDel, inventory.GuardNodeRedlockDel},
		},
		{
			name: "a request pause shorter than the TTL does not outlive the lock",
			lab:  "{nodes: 5}", wl: "{guards: [redlock], rate: 10, duration: 30s, keys: uniform:4, hold: 1s, lock_ttl: 10s}",
			faults:   []string{"{at: 4s, fault: client-pause, for: 5s}"},
			want:     want{inventory.GuardRedlock: {By: PausedHolder}},
			inactive: []inventory.Guard{inventory.GuardRedlockDel},
		},
		{
			name: "a pause that names its guards reaches those",
			lab:  "{nodes: 5}", wl: "{guards: [redlock, redlock-del], rate: 10, duration: 30s, keys: uniform:4, hold: 3s, lock_ttl: 4s}",
			faults:   []string{"{at: 4s, fault: client-pause, for: 2s, guards: [redlock-del]}"},
			want:     want{inventory.GuardRedlockDel: {By: OutlivedHolder}},
			inactive: []inventory.Guard{inventory.GuardRedlock, inventory.GuardDBVersion, inventory.GuardNodeRedlockDel},
		},
		{
			name: "a hot key and no fault: the database's own locks",
			lab:  "{nodes: 5}", wl: "{guards: [redlock], rate: 100, duration: 20s, keys: hot:10:0.9, hold: 5ms}",
			want:     want{inventory.GuardDBVersion: {By: HotKey}, inventory.GuardDBForUpdate: {By: HotKey}},
			inactive: []inventory.Guard{inventory.GuardRedlock, inventory.GuardDBAtomic, inventory.GuardEtcd},
		},
		{
			name: "holds longer than the TTL: the comparisons, with no pause",
			lab:  "{nodes: 5}", wl: "{guards: [redlock], rate: 10, duration: 20s, keys: uniform:100, hold: 5s, lock_ttl: 4s}",
			want:     want{inventory.GuardRedlockDel: {By: OutlivedHolder}, inventory.GuardNodeRedlockDel: {By: OutlivedHolder}},
			inactive: []inventory.Guard{inventory.GuardRedlock},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := reachSpec(t, tc.lab, tc.wl, tc.faults...)
			for g, w := range tc.want {
				if got := s.Reach(g); got != w {
					t.Errorf("%s: got %s, want %s", g, got, w)
				}
				if !s.Reach(g).Applicable() {
					t.Errorf("%s: not applicable, want applicable", g)
				}
			}
			for _, g := range tc.inactive {
				if r := s.Reach(g); r.Applicable() {
					t.Errorf("%s: got %s, want not applicable", g, r)
				}
			}
		})
	}
}

// TestReachTableAgreesWithGuards: every guard a drill can run has a row,
// and the row's faults are those on what the guard locks on
// (inventory's catalogue): a new guard cannot slip out of the matrix.
func TestReachTableAgreesWithGuards(t *testing.T) {
	for _, g := range append(inventory.Guards(), inventory.Comparisons()...) {
		row, ok := guardReach[g]
		if !ok {
			t.Errorf("guard %s has no row in guardReach", g)
			continue
		}
		_, service := inventory.ParseGuard(string(g))
		if got, want := row.By&RedisNodes != 0, g.NeedsNodes() && service == nil; got != want {
			t.Errorf("%s: reached by a fault on Redis nodes %v, want %v (it locks on them: %v)", g, got, want, g.NeedsNodes())
		}
		if got, want := row.By&EtcdMembers != 0, g.NeedsEtcd(); got != want {
			t.Errorf("%s: reached by a fault on etcd members %v, want %v", g, got, want)
		}
		if row.By&row.Control != 0 {
			t.Errorf("%s: %s both reaches it and is its control", g, row.By&row.Control)
		}
	}
}

func TestReachWords(t *testing.T) {
	for _, tc := range []struct {
		r    Reach
		want string
	}{
		{Reach{By: RedisNodes | PausedHolder}, "reached by a fault on Redis nodes, a paused holder"},
		{Reach{Control: RedisNodes}, "a control beside a fault on Redis nodes"},
		{Reach{}, "not applicable"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// TestShippedDrillsRunWhatTheirFaultsReach: every shipped drill runs every
// guard its faults reach or have as a control (the matrix's coverage is
// 100%), and every fault on Redis nodes that an etcd member can take too
// (the catalogue's) has its twin on the etcd members: the same kind at the
// same instant, with the same parameters, on a minority when the nodes are
// a minority and a majority when they are a majority.
func TestShippedDrillsRunWhatTheirFaultsReach(t *testing.T) {
	files, err := filepath.Glob("../../runbooks/drills/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		s, err := ReadFile(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		for _, g := range append(inventory.Guards(), inventory.Comparisons()...) {
			if r := s.Reach(g); r.Applicable() && !contains(s.Workload.Guards, g) {
				t.Errorf("%s: does not run guard %s (%s)", s.Name, g, r)
			}
		}
		for _, nf := range s.Faults {
			def, _ := fault.Lookup(nf.Kind)
			if len(nf.Etcd) > 0 || nf.Kind == fault.ClientPause || !def.Can(fault.EtcdMember) {
				continue
			}
			twin := false
			for _, ef := range s.Faults {
				if len(ef.Etcd) > 0 && ef.Kind == nf.Kind && ef.At == nf.At && reflect.DeepEqual(ef.Params, nf.Params) &&
					(2*len(ef.Etcd) > s.Lab.Etcd) == (2*len(nf.Nodes) > s.Lab.Nodes) {
					twin = true
				}
			}
			if !twin {
				t.Errorf("%s:%d: %s has no twin on as many etcd members (a minority or a majority as the nodes are) at the same instant", s.Name, nf.Line, nf)
			}
		}
	}
}

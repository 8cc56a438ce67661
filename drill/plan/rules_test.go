package plan

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// labFacts are measurements like a local lab's at 300/s: five nodes on one
// fast disk, one clock, a knee well above the target.
func labFacts() Facts {
	return Facts{
		Rate: 300, SLOAcquireP99: 10 * time.Millisecond,
		HoldTail: 9 * time.Second, HoldP50: 7 * time.Second, HoldFrom: "uniform:5s:9s",
		Nodes: 5, RTTP99: 300 * time.Microsecond, RTTNode: "node2",
		AcquireP99: 3 * time.Millisecond, NodeP99: 4 * time.Millisecond, AtRate: 300, Appendfsync: "always",
		DiskMeasured: true, DiskSyncsPerS: 18000, DiskP99: 2 * time.Millisecond, NodesPerDisk: 5, DiskWhere: "this machine",
		SharedClock: true,
		Knee:        1200, KneeBounded: true,
		Miss:   &StepFacts{Rate: 2400, AcquireP99: 40 * time.Millisecond, CPUBusy: 0.97, CPUWhere: "this machine", Why: "acquire.p99<10ms"},
		Lowest: &StepFacts{Rate: 75, AcquireP99: 2 * time.Millisecond, CPUBusy: 0.2},
	}
}

// hostsFacts are three real hosts with chrony as infra/modules/redis-node
// configures it, a slower disk each, cross-zone round trips.
func hostsFacts() Facts {
	f := labFacts()
	f.SharedClock = false
	f.RTTP99, f.RTTNode = 4*time.Millisecond, "host-3"
	f.DiskSyncsPerS, f.DiskP99, f.NodesPerDisk = 2500, 1500*time.Microsecond, 1
	f.ClockChecked, f.MaxSlewPPM, f.FreqPPM = true, 500, 12
	return f
}

func (f Facts) withSteps(b bool) Facts { f.StepsAfterBoot = b; return f }

func TestRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   func() Facts
		// value: the value, its Value text, a source it must cite, and
		// words its rule must contain.
		value, want, cites, ruleHas string
		meets                       bool
		limit                       string
		warn                        string // a warning's message must contain it ("": none expected from this rule)
	}{
		{name: "TTL from the hold tail and the validity margin", in: labFacts,
			value: "ttl", want: "14s", cites: SrcK8sLease, ruleHas: "1.5 × hold tail", meets: true},
		{name: "TTL of a short critical section is at least ten node timeouts",
			in: func() Facts {
				f := labFacts()
				f.HoldTail, f.HoldP50 = 20*time.Millisecond, 10*time.Millisecond
				return f
			},
			value: "ttl", want: "200ms", cites: SrcDoctor, ruleHas: "10 × the node timeout", meets: true},
		{name: "a fixed TTL shorter than the hold tail does not meet",
			in:    func() Facts { f := labFacts(); f.FixedTTL = 5 * time.Second; return f },
			value: "ttl", want: "5s", cites: SrcK8sLease, ruleHas: "hold tail", meets: false, limit: ResTTL, warn: "shorter than the longest hold"},
		{name: "node timeout floor of a few tens of ms", in: labFacts,
			value: "node_timeout", want: "20ms", cites: SrcSeedTimeout, ruleHas: "10 × round-trip p99", meets: true},
		{name: "node timeout from ten cross-zone round trips", in: hostsFacts,
			value: "node_timeout", want: "40ms", cites: SrcEtcdTuning, ruleHas: "10 × round-trip p99 = 40.00 ms", meets: true},
		{name: "node timeout above a tenth of a fixed TTL warns",
			in: func() Facts {
				f := hostsFacts()
				f.HoldTail, f.HoldP50, f.FixedTTL = 100*time.Millisecond, 50*time.Millisecond, 300*time.Millisecond
				return f
			},
			value: "node_timeout", want: "40ms", cites: SrcDoctor, ruleHas: "at most a tenth of the TTL", meets: true, warn: "more than a tenth of the fixed TTL"},
		{name: "backoff capped at half the median hold, else the library's cap", in: labFacts,
			value: "backoff", want: "exponential 10ms to 400ms, jittered", cites: SrcRedlockSpec, ruleHas: "1.2 × cap", meets: true},
		{name: "backoff of short holds", in: func() Facts {
			f := labFacts()
			f.HoldTail, f.HoldP50 = 200*time.Millisecond, 60*time.Millisecond
			return f
		},
			value: "backoff", want: "exponential 10ms to 30ms, jittered", cites: SrcK8sLease, ruleHas: "hold p50 ÷ 2", meets: true},
		{name: "drift: the spec's 1 % on one clock", in: labFacts,
			value: "drift", want: "0.01 + 2ms", cites: SrcRedlockSpec, ruleHas: "max(0.01", meets: true},
		{name: "drift: chrony's default slew rate needs 17 %", in: func() Facts { f := hostsFacts(); f.MaxSlewPPM = 0; return f },
			value: "drift", want: "0.167 + 2ms", cites: SrcRedisNode, ruleHas: "max slew", meets: true, warn: "default maxslewrate"},
		{name: "a makestep that steps after boot is critical", in: func() Facts { return hostsFacts().withSteps(true) },
			value: "drift", want: "0.01 + 2ms", cites: SrcRedlockSpec, ruleHas: "max slew", meets: true, warn: "step the clock after boot"},
		{name: "restart delay covers the TTL, the drift and the margin", in: labFacts,
			value: "restart_delay", want: "17s", cites: SrcSeedRestart, ruleHas: "max_lock_ttl 14s × (1 + 0.01) + restart_margin 2s", meets: true},
		{name: "restart delay's margin grows with the clock offset",
			in: func() Facts {
				f := hostsFacts()
				f.MaxOffset, f.MaxOffsetNode = -1500*time.Millisecond, "host-2"
				return f
			},
			value: "restart_delay", want: "18s", cites: SrcChubby, ruleHas: "restart_margin 3s", meets: true},
		{name: "appendfsync always on a disk with room", in: labFacts,
			value: "persistence", want: "always", cites: SrcSeedRestart, ruleHas: "2 per reservation", meets: true},
		{name: "appendfsync everysec when the disk cannot take always twice over",
			in:    func() Facts { f := hostsFacts(); f.Rate = 900; f.Knee = 1200; return f },
			value: "persistence", want: "everysec", cites: SrcDoctor, ruleHas: "else everysec", meets: true, warn: "cannot take appendfsync always"},
		{name: "five nodes by default, with what each count tolerates", in: labFacts,
			value: "nodes", want: "5", cites: SrcRedlockSpec, ruleHas: "five survive", meets: true},
		{name: "three fixed nodes warn", in: func() Facts { f := labFacts(); f.FixedNodes = 3; return f },
			value: "nodes", want: "3", cites: SrcRedlockSpec, ruleHas: "fixed", meets: true, warn: "restart delay uses up the tolerance"},
		{name: "headroom from the knee", in: labFacts,
			value: "headroom_knee", want: "4.00×", cites: SrcEtcdPerf, ruleHas: "knee ÷ target", meets: true},
		{name: "little headroom warns", in: func() Facts { f := labFacts(); f.Knee = 400; return f },
			value: "headroom_knee", want: "1.33×", cites: SrcEtcdPerf, ruleHas: "knee ÷ target", meets: true, warn: "only 1.33×"},
		{name: "headroom from the disk", in: labFacts,
			value: "headroom_disk", want: "6.0×", cites: SrcEtcdDisk, ruleHas: "18000 ÷ 3000", meets: true},
		{name: "a slow disk's p99 against etcd's bound", in: func() Facts { f := hostsFacts(); f.DiskP99 = 14 * time.Millisecond; return f },
			value: "headroom_disk", want: "4.2×", cites: SrcEtcdDisk, ruleHas: "under 10ms", meets: true, warn: "over etcd's 10ms bound"},
		{name: "no disk measured", in: func() Facts { f := labFacts(); f.DiskMeasured = false; return f },
			value: "headroom_disk", want: "not measured", cites: SrcEtcdDisk, ruleHas: "÷", meets: true, warn: "not measured"},

		// Does not meet: the knee, and the resource that ran out.
		{name: "50,000/s does not meet: CPU", in: func() Facts {
			f := labFacts()
			f.Rate = 50000
			f.Knee, f.Miss = 1600, &StepFacts{Rate: 3200, AcquireP99: 80 * time.Millisecond, CPUBusy: 0.98, CPUWhere: "this machine", Why: "acquire.p99<10ms"}
			return f
		}, value: "headroom_knee", want: "0.03×", cites: SrcEtcdPerf, ruleHas: "knee ÷ target", meets: false, limit: ResCPU},
		{name: "the generator falling behind is CPU too", in: func() Facts {
			f := labFacts()
			f.Rate, f.Knee = 50000, 1600
			f.Miss = &StepFacts{Rate: 3200, AcquireP99: 8 * time.Millisecond, CPUBusy: 0.7, CPUWhere: "this machine", LateShare: 0.2, Why: "operations could not be sent on time"}
			return f
		}, value: "headroom_knee", want: "0.03×", cites: SrcEtcdPerf, ruleHas: "knee ÷ target", meets: false, limit: ResCPU},
		{name: "the disk's fsyncs limit appendfsync always", in: func() Facts {
			f := hostsFacts()
			f.Rate, f.DiskSyncsPerS = 1000, 3600
			f.Knee, f.Miss = 800, &StepFacts{Rate: 1600, AcquireP99: 30 * time.Millisecond, CPUBusy: 0.5, CPUWhere: "host-1", Why: "acquire.p99<10ms"}
			return f
		}, value: "headroom_knee", want: "0.80×", cites: SrcEtcdPerf, ruleHas: "knee ÷ target", meets: false, limit: ResDisk},
		{name: "an SLO under the round trips", in: func() Facts {
			f := hostsFacts()
			f.SLOAcquireP99 = 5 * time.Millisecond
			f.Knee, f.Lowest = 0, &StepFacts{Rate: 75, AcquireP99: 9 * time.Millisecond, CPUBusy: 0.1}
			f.Miss = f.Lowest
			return f
		}, value: "headroom_knee", want: "0.00×", cites: SrcEtcdPerf, ruleHas: "knee ÷ target", meets: false, limit: ResRoundTrips},
		{name: "an SLO under the disk's sync", in: func() Facts {
			f := hostsFacts()
			f.SLOAcquireP99, f.DiskP99, f.RTTP99 = 5*time.Millisecond, 6*time.Millisecond, time.Millisecond
			f.Knee, f.Lowest = 0, &StepFacts{Rate: 75, AcquireP99: 14 * time.Millisecond, CPUBusy: 0.1}
			f.Miss = f.Lowest
			return f
		}, value: "headroom_knee", want: "0.00×", cites: SrcEtcdPerf, ruleHas: "knee ÷ target", meets: false, limit: ResDisk},
		{name: "a stall that is none of the three says so", in: func() Facts {
			f := labFacts()
			f.Knee, f.Lowest = 0, &StepFacts{Rate: 75, AcquireP99: 80 * time.Millisecond, CPUBusy: 0.4}
			f.Miss = f.Lowest
			return f
		}, value: "headroom_knee", want: "0.00×", cites: SrcEtcdPerf, ruleHas: "knee ÷ target", meets: false, limit: ResUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Recommend(tc.in())
			v, ok := r.Value(tc.value)
			if !ok {
				t.Fatalf("no value %q in %+v", tc.value, r.Values)
			}
			if v.Value != tc.want {
				t.Errorf("%s: got %q, want %q (rule: %s; measured: %s)", tc.value, v.Value, tc.want, v.Rule, v.Measured)
			}
			if !slices.Contains(v.Sources, tc.cites) {
				t.Errorf("%s cites %v, want %s among them", tc.value, v.Sources, tc.cites)
			}
			for _, s := range v.Sources {
				if _, ok := source(s); !ok {
					t.Errorf("%s cites %q, which is not in Sources", tc.value, s)
				}
			}
			if !strings.Contains(v.Rule, tc.ruleHas) {
				t.Errorf("%s's rule %q does not say %q", tc.value, v.Rule, tc.ruleHas)
			}
			if v.Measured == "" {
				t.Errorf("%s names no measurement", tc.value)
			}
			if r.Meets != tc.meets {
				t.Errorf("meets: got %t, want %t (limit %+v)", r.Meets, tc.meets, r.Limit)
			}
			switch {
			case tc.limit == "" && r.Limit != nil:
				t.Errorf("got limit %+v, want none", r.Limit)
			case tc.limit != "" && (r.Limit == nil || r.Limit.Resource != tc.limit):
				t.Errorf("got limit %+v, want %s", r.Limit, tc.limit)
			}
			if tc.warn != "" && !slices.ContainsFunc(r.Warnings, func(w Warning) bool { return strings.Contains(w.Message, tc.warn) }) {
				t.Errorf("no warning says %q: %+v", tc.warn, r.Warnings)
			}
		})
	}
}

// TestRulesMeetTheLab: on the lab's measurements every value is set, cites
// a known source, and nothing is wrong.
func TestRulesMeetTheLab(t *testing.T) {
	r := Recommend(labFacts())
	want := []string{"persistence", "node_timeout", "drift", "ttl", "backoff", "restart_delay", "nodes", "headroom_knee", "headroom_disk"}
	var got []string
	for _, v := range r.Values {
		got = append(got, v.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("values %v, want %v", got, want)
	}
	if !r.Meets || len(r.Warnings) != 0 {
		t.Errorf("meets %t with warnings %+v, want a clean plan", r.Meets, r.Warnings)
	}
	if r.TTL != 14*time.Second || r.NodeTimeout != 20*time.Millisecond || r.RestartDelay != 17*time.Second || r.Nodes != 5 {
		t.Errorf("got TTL %v, node timeout %v, restart delay %v, %d nodes; want 14s, 20ms, 17s, 5", r.TTL, r.NodeTimeout, r.RestartDelay, r.Nodes)
	}
	// The validity covers the longest hold 1.5 times over.
	if v := validityOf(r.TTL, 3*time.Millisecond, r.DriftFactor, r.DriftFixed); float64(v) < 1.5*float64(9*time.Second) {
		t.Errorf("validity %v under 1.5 × the 9s hold tail", v)
	}
	// The table of node counts marks the plan's.
	var chosen []int
	for _, c := range r.NodeCounts {
		if c.Chosen {
			chosen = append(chosen, c.Nodes)
		}
		if c.Tolerates != c.Nodes-(c.Nodes/2+1) || c.Faults == "" {
			t.Errorf("node count %+v", c)
		}
	}
	if !slices.Equal(chosen, []int{5}) {
		t.Errorf("chosen node counts %v, want [5]", chosen)
	}
}

func TestRoundTTL(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{13640 * time.Millisecond, 14 * time.Second},
		{1514 * time.Millisecond, 1600 * time.Millisecond},
		{151 * time.Millisecond, 160 * time.Millisecond},
		{10 * time.Second, 10 * time.Second},
	} {
		if got := roundTTL(tc.in); got != tc.want {
			t.Errorf("roundTTL(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

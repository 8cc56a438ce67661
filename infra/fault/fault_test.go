package fault

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func dur(d time.Duration) Value { return Value{D: d} }
func num(n float64) Value       { return Value{N: n} }

// TestRules: the rules the lab, the CLI and the drill spec once each set on
// their own, now one each. want "" accepts; otherwise the *Error names the
// parameter and contains want.
func TestRules(t *testing.T) {
	tests := []struct {
		name   string
		kind   Kind
		params Params
		param  string
		want   string
	}{
		// clock-jump: a backward step is allowed (it is the dangerous one),
		// 0 is not a step, and a day either way is the most.
		{"clock-jump back", ClockJump, Params{"by": dur(-2 * time.Second)}, "", ""},
		{"clock-jump forward", ClockJump, Params{"by": dur(15 * time.Second)}, "", ""},
		{"clock-jump zero", ClockJump, Params{"by": dur(0)}, "by", "want a non-zero duration from -24h to 24h, got 0s"},
		{"clock-jump too far back", ClockJump, Params{"by": dur(-25 * time.Hour)}, "by", "got -25h"},
		{"clock-jump too far", ClockJump, Params{"by": dur(25 * time.Hour)}, "by", "got 25h"},
		{"clock-jump without by", ClockJump, Params{}, "by", "clock-jump needs by (like 15s)"},
		// failover lag: 0..1h.
		{"lag none", Failover, Params{}, "", ""},
		{"lag 1h", Failover, Params{"lag": dur(time.Hour)}, "", ""},
		{"lag over 1h", Failover, Params{"lag": dur(2 * time.Hour)}, "lag", "want a duration from 0s to 1h, got 2h"},
		{"lag negative", Failover, Params{"lag": dur(-time.Second)}, "lag", "got -1s"},
		// clock-rate factor: 0.001..1000.
		{"factor 1.5", ClockRate, Params{"factor": num(1.5), "for": dur(time.Second)}, "", ""},
		{"factor 0", ClockRate, Params{"factor": num(0), "for": dur(time.Second)}, "factor", "want a number from 0.001 to 1000, got 0"},
		{"factor 5000", ClockRate, Params{"factor": num(5000), "for": dur(time.Second)}, "factor", "want a number from 0.001 to 1000, got 5000"},
		{"clock-rate without for", ClockRate, Params{"factor": num(2)}, "for", "clock-rate needs for (like 15s)"},
		// The others.
		{"restart needs delay", Restart, Params{}, "delay", "restart needs delay"},
		{"restart at once", Restart, Params{"delay": dur(0)}, "", ""},
		{"latency in whole ms", Latency, Params{"add": dur(1500 * time.Microsecond)}, "add", "want a whole number of 1ms, got 1.5ms (use 1ms or 2ms)"},
		{"latency 0 removes", Latency, Params{"add": dur(0)}, "", ""},
		{"param of another kind", Kill, Params{"by": dur(time.Second)}, "by", "kill takes no by (it applies to clock-jump)"},
		{"for on a kind without", Kill, Params{"for": dur(time.Second)}, "for", "kill takes no for (it applies to pause, partition, latency, clock-rate, client-pause)"},
		{"pause for 0", Pause, Params{"for": dur(0)}, "for", "want a duration of at least 1ms, got 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.kind, tt.params, ProcessNode, true)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want it accepted", err)
				}
				return
			}
			var fe *Error
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v (%T), want an *Error", err, err)
			}
			if fe.Param != tt.param || !strings.Contains(fe.Rule, tt.want) {
				t.Errorf("got param %q, rule %q; want param %q, a rule with %q", fe.Param, fe.Rule, tt.param, tt.want)
			}
		})
	}
}

// TestTargets: which targets apply what, and the replica rule in one place.
func TestTargets(t *testing.T) {
	tests := []struct {
		kind     Kind
		params   Params
		target   Target
		replicas bool
		want     string // "" accepted
		unsup    bool
	}{
		{Failover, nil, ProcessNode, false, "failover promotes a node's replica: the lab needs replicas", false},
		{Failover, nil, ProcessNode, true, "", false},
		{Failover, nil, MachineNode, false, "failover needs replicas, which a lab of machines does not have", true},
		{ClockJump, Params{"by": dur(time.Second)}, MachineNode, false, "a machine's clock is the host's", true},
		{ClockRate, Params{"factor": num(2), "for": dur(time.Second)}, MachineNode, false, "a machine's clock is the host's", true},
		{Restart, Params{"delay": dur(time.Second)}, MachineNode, false, "only delay 0", true},
		{Restart, Params{"delay": dur(0)}, MachineNode, false, "", false},
		{PowerLoss, nil, EtcdMember, false, "", false},
		{ClockJump, Params{"by": {D: time.Second}}, EtcdMember, false, "clock-jump does not apply to etcd members (they take kill, power-loss, restart, stop, start, pause, partition, heal, latency)", true},
		{ClientPause, Params{"for": dur(time.Second)}, ProcessNode, false, "client-pause does not apply to process nodes", true},
		{ClientPause, Params{"for": dur(time.Second)}, ServiceProcess, false, "", false},
		{Kill, nil, ServiceProcess, false, "kill does not apply to service processes (they take client-pause)", true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s on %s", tt.kind, tt.target), func(t *testing.T) {
			err := Validate(tt.kind, tt.params, tt.target, tt.replicas)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want it accepted", err)
			case tt.want == "":
			case err == nil || !strings.Contains(err.Error(), tt.want):
				t.Fatalf("got %v, want an error with %q", err, tt.want)
			case errors.Is(err, ErrUnsupported) != tt.unsup:
				t.Errorf("errors.Is(err, ErrUnsupported): got %v, want %v", !tt.unsup, tt.unsup)
			}
		})
	}
}

// TestOneTypePerName: a parameter name has one type in every kind, so
// Params' JSON needs no kind; and it goes through JSON unchanged.
func TestOneTypePerName(t *testing.T) {
	types := map[string]Type{}
	for _, d := range Defs() {
		for _, p := range d.AllParams() {
			if t0, ok := types[p.Name]; ok && t0 != p.Type {
				t.Errorf("%s: %s has type %d here, %d elsewhere", d.Kind, p.Name, p.Type, t0)
			}
			types[p.Name] = p.Type
		}
	}
	in := Params{"delay": dur(0), "by": dur(-2 * time.Second), "factor": num(1.5)}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"by":"-2s","delay":"0s","factor":1.5}`; string(b) != want {
		t.Errorf("JSON: got %s, want %s", b, want)
	}
	var out Params
	if err := json.Unmarshal([]byte(`{"by":"-2s","delay":"0s","factor":1.5,"target":"leader"}`), &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 || out.D("by") != -2*time.Second || !out.Has("delay") || out.N("factor") != 1.5 {
		t.Errorf("from JSON: got %+v, want %+v", out, in)
	}
}

func TestParse(t *testing.T) {
	if v, err := Parse(ClockJump, "by", "-2s"); err != nil || v.D != -2*time.Second {
		t.Errorf("by -2s: got %v, %v", v, err)
	}
	for _, tc := range []struct {
		kind       Kind
		name, text string
		want       string
	}{
		{ClockJump, "by", "soon", `by: want a duration like 15s, got "soon"`},
		{ClockRate, "factor", "fast", `factor: want a number like 1.5, got "fast"`},
		{ClockRate, "factor", "1.5x", `factor: want a number like 1.5, got "1.5x"`},
		{ClockRate, "factor", "NaN", `factor: want a number like 1.5, got "NaN"`},
		{ClientPause, "count", "1.5", `count: want a whole number like 1, got "1.5"`},
		{Kill, "lag", "1s", "kill takes no lag (it applies to failover)"},
	} {
		if _, err := Parse(tc.kind, tc.name, tc.text); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s %q: got %v, want %q", tc.kind, tc.name, tc.text, err, tc.want)
		}
	}
}

func ExampleValidate() {
	err := Validate(ClockRate, Params{"factor": {N: 5000}, "for": {D: 10 * time.Second}}, ProcessNode, false)
	fmt.Println(err)
	fmt.Println(Validate(ClockJump, Params{"by": {D: -2 * time.Second}}, ProcessNode, false))
	// Output:
	// clock-rate: factor: want a number from 0.001 to 1000, got 5000
	// <nil>
}

package fault

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// complete is one implementation per target, applying exactly what the
// catalogue gives it.
func complete() []Implementation {
	var impls []Implementation
	for t := range targetNames {
		im := Implementation{Target: t, Where: "test " + t.String()}
		for _, d := range catalogue {
			if d.Can(t) {
				im.Kinds = append(im.Kinds, d.Kind)
			}
		}
		impls = append(impls, im)
	}
	return impls
}

func TestCheckImplementations(t *testing.T) {
	if err := CheckImplementations(complete()...); err != nil {
		t.Fatalf("one implementation of every pair: %v", err)
	}
	drop := func(impls []Implementation, target Target, kind Kind) []Implementation {
		for i := range impls {
			if impls[i].Target == target {
				var ks []Kind
				for _, k := range impls[i].Kinds {
					if k != kind {
						ks = append(ks, k)
					}
				}
				impls[i].Kinds = ks
			}
		}
		return impls
	}
	tests := []struct {
		name  string
		impls []Implementation
		want  string
	}{
		{"missing", drop(complete(), EtcdMember, PowerLoss), "power-loss on etcd members: no implementation"},
		{"twice in one table", append(complete(), Implementation{Target: SSHHost, Kinds: []Kind{Kill}, Where: "another"}), "kill on hosts over SSH: 2 implementations (test host over SSH, another)"},
		{"not the target's", append(drop(complete(), ServiceProcess, ClientPause), Implementation{Target: ServiceProcess, Kinds: []Kind{ClientPause, Kill}, Where: "svc"}), "svc applies kill on service processes, which the catalogue does not give it"},
		{"no target at all", drop(complete(), ProcessNode, Failover), "failover on process nodes: no implementation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckImplementations(tt.impls...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestTable(t *testing.T) {
	apply := func(what string) ApplyFunc[*[]string] {
		return func(log *[]string, _ context.Context, p Params) (Result, error) {
			*log = append(*log, what)
			return Result{ID: what}, nil
		}
	}
	tb := Table[*[]string]{Target: MachineNode, Where: "test"}.With(Kill, apply("kill")).With(Stop, apply("stop"))
	replaced := tb.Replace(Stop, apply("systemctl stop"))
	var log []string
	for _, step := range []struct {
		tb   Table[*[]string]
		kind Kind
	}{{tb, Kill}, {tb, Stop}, {replaced, Stop}} {
		res, err := step.tb.Apply(context.Background(), &log, step.kind, nil)
		if err != nil || res.Kind != step.kind {
			t.Fatalf("%s: got %+v, %v", step.kind, res, err)
		}
	}
	if got := strings.Join(log, ","); got != "kill,stop,systemctl stop" {
		t.Errorf("applied %s, want kill,stop,systemctl stop (Replace leaves the table it came from alone)", got)
	}
	if _, err := tb.Apply(context.Background(), &log, Pause, nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a kind without an entry: got %v, want ErrUnsupported", err)
	}
	im := tb.With(Kill, apply("again")).Implementation()
	if err := CheckImplementations(im); len(im.Kinds) != 3 || err == nil || !strings.Contains(err.Error(), "kill on machine nodes: 2 implementations (test, test)") {
		t.Errorf("a kind given twice: %+v, %v; want it listed twice and refused", im, err)
	}
}

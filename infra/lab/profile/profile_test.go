package profile

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		p     Profile
		field string // "" when valid
		rule  string
	}{
		{"defaults", Profile{}, "", ""},
		{"too many nodes", Profile{Nodes: 100}, "nodes", "want 1-99 nodes"},
		{"bad persistence", Profile{Persistence: []Persistence{"sometimes"}}, "persistence", `want always, everysec, no-fsync or none, got "sometimes"`},
		{"profiles for too few nodes", Profile{Nodes: 3, Persistence: []Persistence{PersistAlways, PersistNone}}, "persistence", "one per node (3), got 2"},
		{"one per node", Profile{Nodes: 3, Persistence: []Persistence{PersistAlways, PersistEverysec, PersistNone}}, "", ""},
		{"negative delay", Profile{RestartDelay: -time.Second}, "restart_delay", "at least 0"},
		{"sub-millisecond delay", Profile{RestartDelay: time.Microsecond}, "restart_delay", "at least 1ms"},
		{"delay and no delay", Profile{RestartDelay: time.Second, NoRestartDelay: true}, "restart_delay", "give one of them"},
		{"no delay", Profile{NoRestartDelay: true}, "", ""},
		{"delay over an hour", Profile{RestartDelay: 2 * time.Hour}, "restart_delay", "at most 1h"},
		{"two replicas", Profile{Replicas: 2}, "replicas", "want 0"},
		{"machines with replicas", Profile{Machines: true, Replicas: 1}, "machines", "do not go together"},
		{"ssh without machines", Profile{SSH: true}, "ssh", "needs machines"},
		{"ssh with machines", Profile{SSH: true, Machines: true}, "", ""},
		{"even etcd", Profile{Etcd: 2}, "etcd", "odd"},
		{"etcd with machines", Profile{Etcd: 3, Machines: true}, "etcd", "process nodes only"},
		{"no fsync without etcd", Profile{EtcdUnsafeNoFsync: true}, "etcd_unsafe_no_fsync", "no etcd members"},
		{"tls with replicas", Profile{TLS: true, Replicas: 1}, "tls", "independent process nodes only"},
		{"tls with machines", Profile{TLS: true, Machines: true}, "tls", "independent process nodes only"},
		{"tls and etcd and the power-loss layer", Profile{TLS: true, Etcd: 3, PowerLoss: true}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.p.WithDefaults()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("got %v, want valid", err)
				}
				return
			}
			var pe *Error
			if !errors.As(err, &pe) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want a *profile.Error on %s", err, tt.field)
			}
			if pe.Field != tt.field || !strings.Contains(pe.Rule, tt.rule) {
				t.Errorf("got %s: %s, want %s: …%s…", pe.Field, pe.Rule, tt.field, tt.rule)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	p := Default()
	if p.Nodes != 5 || len(p.Persistence) != 5 || p.Uniform() != PersistAlways || p.RestartDelay != DefaultRestartDelay || p.PowerLoss {
		t.Errorf("got %+v, want five nodes, always on each, the default delay, plain directories", p)
	}
	if DefaultRestartDelay <= 10*time.Second {
		t.Errorf("default restart delay %v: want more than the default lock TTL of 10s", DefaultRestartDelay)
	}
	p, err := Profile{Nodes: 3, Persistence: []Persistence{PersistEverysec}, NoRestartDelay: true}.WithDefaults()
	if err != nil || FormatPersistenceList(p.Persistence) != "everysec,everysec,everysec" || p.RestartDelay != 0 {
		t.Errorf("got %+v, %v; want everysec on three nodes and no delay", p, err)
	}
	if got := Uniform([]Persistence{PersistAlways, PersistNone}); got != PersistMixed {
		t.Errorf("Uniform of two profiles: got %q, want mixed", got)
	}
}

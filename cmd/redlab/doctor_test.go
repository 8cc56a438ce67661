package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

func runDoctorArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), &env{stdout: &out, stderr: &errOut}, append([]string{"doctor"}, args...))
	return code, out.String(), errOut.String()
}

func TestDoctor(t *testing.T) {
	good := redlocktest.Start(t, 3, redlocktest.Options{})
	bad := redlocktest.Start(t, 1, redlocktest.Options{AppendFsync: "everysec", Extra: []string{"maxmemory-policy allkeys-lru"}})
	goodNodes := strings.Join(good.Addrs(), ",")
	t.Setenv("REDLAB_NODES", "")

	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
	}{
		{"good nodes", []string{"--nodes", goodNodes, "--timeout", "250ms"}, exitOK,
			[]string{"NODE", "SEVERITY", "appendfsync always", "3 nodes; 29 findings: 0 critical, 0 warnings, 29 ok"}},
		{"bad node", []string{"--nodes", good.Nodes[0].Addr + "," + good.Nodes[1].Addr + "," + bad.Nodes[0].Addr, "--timeout", "250ms"}, exitFailure,
			[]string{"maxmemory-policy allkeys-lru", "critical", "appendfsync everysec", "Set maxmemory-policy noeviction", "3 nodes; 29 findings: 1 critical, 1 warning, 27 ok"}},
		{"timeout large against ttl", []string{"--nodes", goodNodes, "--ttl", "1s", "--timeout", "250ms"}, exitOK,
			[]string{"timeouts", "warning"}},
		{"no nodes", nil, exitUsage, nil},
		{"bad address", []string{"--nodes", "localhost"}, exitUsage, nil},
		{"bad ttl", []string{"--nodes", goodNodes, "--ttl", "0s"}, exitUsage, nil},
		{"bad timeout", []string{"--nodes", goodNodes, "--timeout", "-1ms"}, exitUsage, nil},
		{"unknown flag", []string{"--nodes", goodNodes, "--bogus"}, exitUsage, nil},
		{"stray argument", []string{"--nodes", goodNodes, "extra"}, exitUsage, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runDoctorArgs(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("got exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if tc.wantCode == exitUsage && out != "" {
				t.Errorf("usage error printed to stdout: %q", out)
			}
		})
	}
}

func TestDoctorNodesFromEnv(t *testing.T) {
	good := redlocktest.Start(t, 3, redlocktest.Options{})
	t.Setenv("REDLAB_NODES", strings.Join(good.Addrs(), ","))
	if code, out, errOut := runDoctorArgs(t, "--timeout", "250ms"); code != exitOK {
		t.Fatalf("got exit %d, want 0\n%s%s", code, out, errOut)
	}
}

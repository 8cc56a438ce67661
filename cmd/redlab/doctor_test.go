package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlocklab/redlocklab/infra/node"
	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

func runDoctorArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), &env{stdout: &out, stderr: &errOut}, append([]string{"doctor"}, args...))
	noMapInOutput(t, args, out.String(), errOut.String())
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

// aclNodes starts n nodes with the ACL the redis-node module renders for
// Redis 7.0 (the default user off, a read-only monitor user) and a user
// that may log in but not read the settings; it returns the node list and
// the credentials of the lab-style file it wrote.
func aclNodes(t *testing.T, n int) (nodes string, creds node.Credentials, credsFile string) {
	t.Helper()
	creds, err := node.EnsureCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	connect := "+hello +auth +ping +client|setname"
	c := redlocktest.Start(t, n, redlocktest.Options{Extra: []string{
		"user default off resetpass resetkeys resetchannels -@all",
		"user monitor on >" + creds.Monitor.Password + " resetkeys resetchannels -@all " + connect + " +info +config|get +time",
		"user blind on >" + creds.Monitor.Password + " resetkeys resetchannels -@all " + connect + " +time",
	}})
	dir := t.TempDir()
	credsFile = filepath.Join(dir, node.CredentialsFile)
	b, err := json.Marshal(creds)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(credsFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return strings.Join(c.Addrs(), ","), creds, credsFile
}

// TestDoctorLogin checks that an audit that could not log in fails and
// says how to log in, that a user denied a read leaves its checks
// unchecked with the permission to grant, and that the monitoring login
// audits as if the nodes had no ACL.
func TestDoctorLogin(t *testing.T) {
	nodes, creds, credsFile := aclNodes(t, 3)
	open := redlocktest.Start(t, 3, redlocktest.Options{})
	t.Setenv("REDLAB_NODES", "")

	for _, tc := range []struct {
		name             string
		env              map[string]string
		args             []string
		wantCode         int
		wantOut, wantErr []string
		notOut           []string
	}{
		{"no login", nil, nil, exitFailure,
			[]string{"login", "unchecked", "no login was given (NOAUTH", "Log in as the node set's monitoring user",
				"not read: the node refused the login", "3 nodes (3 refused the login); 32 findings: 0 critical, 0 warnings, 24 unchecked, 8 ok"},
			[]string{"could not log in to 3 of 3 nodes without a login (NOAUTH", "$REDLAB_CREDENTIALS", "--username monitor", "$REDLAB_PASSWORD"},
			[]string{"Allow INFO", "warning "}},
		{"wrong password", map[string]string{"REDLAB_PASSWORD": "not-the-password"}, []string{"--username", "monitor"}, exitFailure,
			[]string{"the login as monitor was refused (WRONGPASS"},
			[]string{"could not log in to 3 of 3 nodes as monitor (WRONGPASS", "$REDLAB_CREDENTIALS"}, nil},
		{"user that may not read", map[string]string{"REDLAB_PASSWORD": creds.Monitor.Password}, []string{"--username", "blind"}, exitFailure,
			[]string{"cannot read INFO replication: NOPERM", "Allow INFO (+info) for the monitoring user.", "Allow CONFIG GET for the monitoring user (+config|get)",
				"clock offset", "3 nodes; 29 findings: 0 critical, 0 warnings, 18 unchecked, 11 ok"},
			[]string{"18 unchecked findings: see the FIX column"}, []string{"could not log in"}},
		{"monitoring login", map[string]string{"REDLAB_PASSWORD": creds.Monitor.Password}, []string{"--username", "monitor"}, exitOK,
			[]string{"appendfsync always", "3 nodes; 29 findings: 0 critical, 0 warnings, 29 ok"}, nil, []string{"unchecked", "login"}},
		{"lab credentials", map[string]string{"REDLAB_CREDENTIALS": credsFile}, nil, exitOK,
			[]string{"3 nodes; 29 findings: 0 critical, 0 warnings, 29 ok"}, nil, []string{"unchecked"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("REDLAB_CREDENTIALS", "")
			t.Setenv("REDLAB_PASSWORD", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, out, errOut := runDoctorArgs(t, append([]string{"--nodes", nodes, "--timeout", "250ms"}, tc.args...)...)
			if code != tc.wantCode {
				t.Fatalf("got exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
			for _, w := range tc.notOut {
				if strings.Contains(out, w) {
					t.Errorf("stdout has %q:\n%s", w, out)
				}
			}
		})
	}

	// The monitoring login's table is the one nodes without ACLs give, but
	// for the addresses and the measured clock.
	t.Setenv("REDLAB_CREDENTIALS", credsFile)
	_, withLogin, _ := runDoctorArgs(t, "--nodes", nodes, "--timeout", "250ms")
	t.Setenv("REDLAB_CREDENTIALS", "")
	_, noACL, _ := runDoctorArgs(t, "--nodes", strings.Join(open.Addrs(), ","), "--timeout", "250ms")
	if got, want := checkColumns(withLogin), checkColumns(noACL); got != want {
		t.Errorf("with the monitoring login, checks and severities\n%s\nwant those of nodes without ACLs\n%s", got, want)
	}
}

// checkColumns keeps each finding line's CHECK and SEVERITY columns and the
// summary line.
func checkColumns(out string) string {
	var b strings.Builder
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 4 && f[0] == "all":
			fmt.Fprintln(&b, f[1], f[2])
		case len(f) >= 5 && f[0] != "NODE":
			fmt.Fprintln(&b, f[2], f[3])
		case strings.Contains(line, "findings"):
			b.WriteString(line)
		}
	}
	return b.String()
}

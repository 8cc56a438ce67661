package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestFaultEtcdUsage: members are numbers from 1 or "leader", each kind
// keeps its flags' checks, and a lab that is not there is a failure, not a
// usage error.
func TestFaultEtcdUsage(t *testing.T) {
	t.Setenv(envStateDir, filepath.Join(t.TempDir(), "nolab"))
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"fault", "etcd", "kill", "0"}, exitUsage, `etcd member "0": want a member number from 1, or leader`},
		{[]string{"fault", "etcd", "kill", "leaders"}, exitUsage, `etcd member "leaders"`},
		{[]string{"fault", "etcd", "kill"}, exitUsage, "takes exactly one member"},
		{[]string{"fault", "etcd", "pause", "leader"}, exitUsage, "--for: pause needs for (like 15s)"},
		{[]string{"fault", "etcd", "restart", "2"}, exitUsage, "--delay: restart needs delay (like 0s)"},
		{[]string{"fault", "etcd", "heal", "x"}, exitUsage, `node "x": want a node number from 1`},
		{[]string{"fault", "etcd", "clock-jump", "1"}, exitUsage, `unknown command "clock-jump"`},
		{[]string{"fault", "etcd", "kill", "leader"}, exitFailure, "no lab in this state directory"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runArgs(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("got exit %d, stdout %q, stderr %q; want exit %d with %q on stderr", code, stdout, stderr, tc.code, tc.want)
			}
		})
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// paritySpec is a drill with one fault on node 3; LAB and FAULT are
// replaced.
const paritySpec = `---
drill: parity
lab: {nodes: 5LAB}
workload: {guards: [redlock], rate: 10, duration: 30s}
faults:
  - {at: 10s, fault: FAULT}
expect:
  redlock: ["safety.lock_violations>=0"]
---
`

// downLab writes the state directory of a five-node lab that is not up
// (its control endpoints are a port nothing listens on), with replicas or
// not: what `redlab fault` needs to judge the lab's part of a fault.
func downLab(t *testing.T, replicas int) string {
	t.Helper()
	dir := t.TempDir()
	dead := deadAddrs(t, 5)
	nodes := make([]map[string]any, 5)
	for i := range nodes {
		nodes[i] = map[string]any{"id": i + 1, "addr": dead[i], "redis_addr": dead[i], "control": dead[i]}
	}
	b, err := json.Marshal(map[string]any{"nodes": 5, "base_port": 7100, "persistence": []string{"always", "always", "always", "always", "always"}, "replicas": replicas, "endpoints": nodes})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lab.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFaultAndDrillCheckAgree: for the values the lab, the CLI and the
// drill spec once judged each on their own, `redlab fault` and `redlab
// drill --check` give one verdict: both accept, or both exit 2 with the
// same rule. `redlab fault` judges before contacting the lab: with no lab
// (or one that is down) an accepted fault fails on the lab (exit 1), a
// refused one is a usage error (exit 2).
func TestFaultAndDrillCheckAgree(t *testing.T) {
	tests := []struct {
		name      string
		cli       []string // after "fault"
		replicas  int      // the lab's, for both
		spec      string   // the spec's fault, after "fault: "
		wantParam string   // the spec's field and the CLI's flag; "" for the fault itself
		want      string   // the rule both give; "" both accept
	}{
		{"clock-jump back", []string{"clock-jump", "3", "--by", "-2s"}, 0, "clock-jump, nodes: [3], by: -2s", "", ""},
		{"clock-jump zero", []string{"clock-jump", "3", "--by", "0s"}, 0, "clock-jump, nodes: [3], by: 0s", "by", "want a non-zero duration from -24h to 24h, got 0s"},
		{"clock-jump two days", []string{"clock-jump", "3", "--by=-48h"}, 0, "clock-jump, nodes: [3], by: -48h", "by", "want a non-zero duration from -24h to 24h, got -48h"},
		{"lag 1h", []string{"failover", "3", "--lag", "1h"}, 1, "failover, nodes: [3], lag: 1h", "", ""},
		{"lag over 1h", []string{"failover", "3", "--lag", "2h"}, 1, "failover, nodes: [3], lag: 2h", "lag", "want a duration from 0s to 1h, got 2h"},
		{"factor 2", []string{"clock-rate", "3", "--factor", "2", "--for", "5s"}, 0, "clock-rate, nodes: [3], factor: 2, for: 5s", "", ""},
		{"factor 5000", []string{"clock-rate", "3", "--factor", "5000", "--for", "5s"}, 0, "clock-rate, nodes: [3], factor: 5000, for: 5s", "factor", "want a number from 0.001 to 1000, got 5000"},
		{"factor 0.0001", []string{"clock-rate", "3", "--factor", "0.0001", "--for", "5s"}, 0, "clock-rate, nodes: [3], factor: 0.0001, for: 5s", "factor", "want a number from 0.001 to 1000, got 0.0001"},
		{"failover with replicas", []string{"failover", "3"}, 1, "failover, nodes: [3]", "", ""},
		{"failover without replicas", []string{"failover", "3"}, 0, "failover, nodes: [3]", "", "failover promotes a node's replica: the lab needs replicas"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The CLI, against a lab that is down.
			state := downLab(t, tt.replicas)
			code, stdout, cliErr := runArgs(t, append(append([]string{"fault"}, tt.cli...), "--state-dir", state)...)
			if stdout != "" {
				t.Errorf("fault: stdout %q, want nothing", stdout)
			}
			// The spec.
			lab := ""
			if tt.replicas > 0 {
				lab = fmt.Sprintf(", replicas: %d", tt.replicas)
			}
			spec := strings.NewReplacer("LAB", lab, "FAULT", tt.spec).Replace(paritySpec)
			path := filepath.Join(t.TempDir(), "parity.md")
			if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
				t.Fatal(err)
			}
			specCode, _, specErr := runArgs(t, "drill", "--check", path)

			if tt.want == "" {
				// Accepted: the spec is valid, and the CLI got as far as
				// the lab's control endpoint (down).
				if specCode != exitOK {
					t.Errorf("drill --check: got exit %d, want %d; stderr %q", specCode, exitOK, specErr)
				}
				if code != exitFailure || !strings.Contains(cliErr, "control endpoint") {
					t.Errorf("fault: got exit %d, stderr %q; want %d, failing on the lab's control endpoint", code, cliErr, exitFailure)
				}
				return
			}
			field, flag := "faults[0].fault: ", ""
			if tt.wantParam != "" {
				field, flag = "faults[0]."+tt.wantParam+": ", "--"+tt.wantParam+": "
			}
			if specCode != exitUsage || !strings.Contains(specErr, fmt.Sprintf("%s:6: %s%s", path, field, tt.want)) {
				t.Errorf("drill --check: got exit %d, stderr %q; want %d with %q at line 6", specCode, specErr, exitUsage, field+tt.want)
			}
			if code != exitUsage || !strings.Contains(cliErr, flag+tt.want) {
				t.Errorf("fault: got exit %d, stderr %q; want %d with %q", code, cliErr, exitUsage, flag+tt.want)
			}
		})
	}
}

package verify

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestModuleTests runs the provider-less modules' own tests/*.tftest.hcl
// with the binary under test (tofu or terraform) on a copy of each module.
// node-generations applies terraform_data for real, run after run.
func TestModuleTests(t *testing.T) {
	bin := tfBinary(t)
	for _, module := range []string{"redis-node", "node-generations"} {
		t.Run(module, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, moduleDir(t, module), dir)
			r := runTF(tfContext(t), bin, dir, "test", "-no-color")
			if r.err != nil {
				t.Fatalf("module tests failed: %s", r)
			}
			summary := regexp.MustCompile(`Success! (\d+) passed, 0 failed`).FindString(r.stdout)
			if summary == "" {
				t.Fatalf("no success summary in the test output:\n%s", r.stdout)
			}
			t.Logf("%s test: %s", filepath.Base(bin), summary)
		})
	}
}

// TestRuleRemovalFailsModuleTests removes or weakens one rule at a time in a
// copy of the module and expects the module's tests to fail on the assertion
// that guards that rule: every rule is really tested.
func TestRuleRemovalFailsModuleTests(t *testing.T) {
	bin := tfBinary(t)
	mutations := []struct {
		name      string
		file      string // under infra/modules/redis-node, or another module's path
		from, to  string
		testFile  string
		wantError string // a phrase of the failing assertion's error_message
	}{
		{"definitions follow their inputs", "../node-generations/main.tf", "    ignore_changes = [input]\n", "",
			"roll", "Every node must keep the definition it has until its generation changes"},
		{"generations ignored", "../node-generations/main.tf", "  triggers_replace = lookup(var.generations, each.key, \"0\")\n", "",
			"roll", "Raising node 1's generation must replace node 1"},
		{"appendfsync removed", "templates/redis.conf.tftpl", "appendfsync ${fsync}\n", "",
			"redis_conf", "must fsync every write"},
		{"appendonly off", "templates/redis.conf.tftpl", `appendonly ${persistence ? "yes" : "no"}`, "appendonly no",
			"redis_conf", "must turn the append-only file on"},
		{"fsync paused during rewrites", "templates/redis.conf.tftpl", "no-appendfsync-on-rewrite no", "no-appendfsync-on-rewrite yes",
			"redis_conf", "keep fsyncing during AOF rewrites"},
		{"TLS node left in plain text", "templates/redis.conf.tftpl", "port 0\ntls-port ${port}\n", "port ${port}\n",
			"redis_conf", "With tls, plain TCP must be off"},
		{"TLS files fetched inside Redis's IP firewall", "templates/redlock-redis.service.tftpl", "ExecStartPre=+/usr/bin/systemctl start redlock-tls-fetch.service", "ExecStartPre=+${tls_fetch_path}",
			"cloud_init", "must have the TLS files fetched before Redis starts"},
		{"eviction allowed", "templates/redis.conf.tftpl", "maxmemory-policy noeviction", "maxmemory-policy allkeys-lru",
			"redis_conf", "must never evict keys"},
		{"replica of another node", "templates/redis.conf.tftpl", "protected-mode yes\n", "protected-mode yes\nreplicaof 10.0.0.9 6379\n",
			"redis_conf", "must not make the node a replica"},
		{"partitions' iptables not installed", "main.tf", `"chrony", "iptables", "python3"`, `"chrony", "python3"`,
			"cloud_init", "must install what the faults over SSH run"},
		{"default user on", "main.tf", `"user default off resetpass resetkeys resetchannels -@all"`, `"user default on nopass ~* +@all"`,
			"redis_conf", "default user must be off"},
		{"redlock user gets every key", "main.tf", "~${var.lock_key_prefix}*", "~*",
			"redis_conf", "touch only lock:* keys"},
		{"makestep unlimited", "templates/chrony.conf.tftpl", "makestep 1 1\n", "makestep 1 -1\n",
			"chrony", "makestep must allow a step at the first update only"},
		{"makestep at three updates", "templates/chrony.conf.tftpl", "makestep 1 1\n", "makestep 1 3\n",
			"chrony", "makestep must allow a step at the first update only"},
		{"first server not preferred", "templates/chrony.conf.tftpl", `${i == 0 ? " prefer" : ""}`, "",
			"chrony", "prefer the first"},
		{"poll interval ignored", "templates/chrony.conf.tftpl", `${poll_exponent == null ? "" : " minpoll ${poll_exponent} maxpoll ${poll_exponent}"}`, "",
			"chrony", "ntp_poll_exponent must poll every server"},
		{"restarted chronyd may step", "templates/chrony-redlock.conf.tftpl", "then exec /usr/sbin/chronyd $$DAEMON_OPTS -R; fi; ", "then :; fi; ",
			"chrony", "must get -R"},
		{"fast slew", "templates/chrony.conf.tftpl", "maxslewrate 500", "maxslewrate 83333",
			"chrony", "maxslewrate must be at most 500"},
		{"leap second stepped", "templates/chrony.conf.tftpl", "leapsecmode slew", "leapsecmode system",
			"chrony", "Leap seconds must be slewed"},
		{"timesyncd left on", "templates/cloud-init.yaml.tftpl", "  - [systemctl, mask, systemd-timesyncd.service]\n", "",
			"chrony", "must disable systemd-timesyncd"},
		{"start limit", "templates/redlock-redis.service.tftpl", "StartLimitIntervalSec=0\n", "",
			"restart_guard", "StartLimitIntervalSec=0 must be set"},
		{"not after time sync", "templates/redlock-redis.service.tftpl", "After=network-online.target chrony.service time-sync.target", "After=network-online.target chrony.service",
			"restart_guard", "must start after time-sync.target"},
		{"time-sync.target pulled in", "templates/redlock-redis.service.tftpl", "Wants=network-online.target chrony.service\n", "Wants=network-online.target chrony.service time-sync.target\n",
			"restart_guard", "must not pull in time-sync.target"},
		{"no wait for the clock", "templates/redlock-redis.service.tftpl", "ExecStartPre=+/usr/bin/chronyc -h /run/chrony/chronyd.sock waitsync 0 0.1 0 2\n", "",
			"restart_guard", "must wait for chrony to synchronise"},
		{"a bounded wait for the clock", "templates/redlock-redis.service.tftpl", "waitsync 0 0.1 0 2", "waitsync 90 0.1 0 2",
			"restart_guard", "must wait for chrony to synchronise"},
		{"guard before the clock", "templates/redlock-redis.service.tftpl", "# Start only on a synchronised clock", "ExecStartPre=${guard_path} pre-start\n# Start only on a synchronised clock",
			"restart_guard", "chronyc waitsync must run first"},
		{"any program may run", "templates/redlock-redis.service.tftpl", "/usr/bin/bash /usr/bin/dash", "/usr/bin",
			"restart_guard", "ExecPaths must name programs"},
		{"no IP firewall", "templates/redlock-redis.service.tftpl", "IPAddressDeny=any\n", "",
			"restart_guard", "must deny every address"},
		{"other processes visible", "templates/redlock-redis.service.tftpl", "ProtectProc=invisible\n", "",
			"restart_guard", "must hide other processes"},
		{"IPC left behind", "templates/redlock-redis.service.tftpl", "RemoveIPC=true\n", "",
			"restart_guard", "must hide other processes"},
		{"no OOM preference", "templates/redlock-redis.service.tftpl", "OOMScoreAdjust=-900\n", "",
			"restart_guard", "OOMScoreAdjust must"},
		{"unkillable Redis", "templates/redlock-redis.service.tftpl", "OOMScoreAdjust=-900\n", "OOMScoreAdjust=-1000\n",
			"restart_guard", "OOMScoreAdjust must"},
		{"started before its mount", "templates/redlock-redis.service.tftpl", "RequiresMountsFor=${data_dir}\n", "",
			"restart_guard", "before the data directory's file system is mounted"},
		{"no overcommit", "templates/sysctl.conf", "vm.overcommit_memory = 1", "vm.overcommit_memory = 0",
			"cloud_init", "must allow memory overcommit"},
		{"data volume blocks the boot", "main.tf", "defaults,noatime,nofail,", "defaults,noatime,",
			"cloud_init", "optional for the boot"},
		{"blank data volume never formatted", "main.tf", "x-systemd.makefs,", "",
			"cloud_init", "made ext4 when blank"},
		{"fstab replaced", "templates/cloud-init.yaml.tftpl", "    append: true\n", "",
			"cloud_init", "append the data volume's line"},
		{"guard does not sleep", "templates/restart-guard.sh.tftpl", "\t\tsleep \"$delay\"\n", "",
			"restart_guard", "must actually sleep"},
		{"delay without margin", "main.tf", "(1 + var.clock_drift_ratio) + var.restart_margin)", "(1 + var.clock_drift_ratio))",
			"restart_guard", "must be max_lock_ttl * (1 + clock_drift_ratio) + restart_margin"},
		{"fixed margin for any TTL", "main.tf", "var.max_lock_ttl * (1 + var.clock_drift_ratio)", "var.max_lock_ttl",
			"restart_guard", "A day-long TTL must get 1% of it"},
		{"Debian's unit name", "main.tf", `unit_name = "redlock-redis.service"`, `unit_name = "redis-server.service"`,
			"restart_guard", "must not be named like Debian"},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel() // each run is mostly process start-up
			module, file := "redis-node", m.file
			if rest, ok := strings.CutPrefix(m.file, "../"); ok {
				module, file, _ = strings.Cut(rest, "/")
			}
			dir := t.TempDir()
			copyTree(t, moduleDir(t, module), dir)
			path := filepath.Join(dir, file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// Exactly one match: a mutation that no longer applies must be
			// updated along with the template, not silently do nothing.
			if n := strings.Count(string(data), m.from); n != 1 {
				t.Fatalf("%s contains %q %d times, want 1", m.file, m.from, n)
			}
			mutated := strings.Replace(string(data), m.from, m.to, 1)
			if err := os.WriteFile(path, []byte(mutated), 0o644); err != nil {
				t.Fatal(err)
			}
			r := runTF(tfContext(t), bin, dir, "test", "-no-color", "-filter=tests/"+m.testFile+".tftest.hcl")
			if r.err == nil {
				t.Fatalf("module tests passed with %q replaced by %q in %s, want a failure", m.from, m.to, m.file)
			}
			if out := flatten(r.stdout + r.stderr); !strings.Contains(out, m.wantError) {
				t.Fatalf("module tests failed, but not on the assertion %q:\n%s", m.wantError, r)
			}
		})
	}
}

// flatten undoes the line wrapping and box drawing of diagnostics so that an
// error message can be found whole.
func flatten(s string) string {
	s = strings.NewReplacer("│", " ", "╷", " ", "╵", " ").Replace(s)
	return strings.Join(strings.Fields(s), " ")
}

// TestFormat runs `fmt -check` on the modules and the AWS example.
// (make test-infra checks all of infra/, the lab's root module included.)
func TestFormat(t *testing.T) {
	bin := tfBinary(t)
	for _, dir := range []string{"../modules/redis-node", "../modules/node-generations", "../modules/aws", "../envs/aws"} {
		abs, err := filepath.Abs(dir)
		if err != nil {
			t.Fatal(err)
		}
		if r := runTF(tfContext(t), bin, abs, "fmt", "-check", "-recursive", "-diff", "-no-color"); r.err != nil {
			t.Errorf("%s is not formatted: %s", dir, r)
		}
	}
}

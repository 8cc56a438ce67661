package verify

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
)

// testDataDevice is the data volume the "deployed" node mounts, named as
// modules/aws names it.
const testDataDevice = "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0"

// renderNodeFiles renders two nodes: "deployed" with the module's defaults as
// modules/aws uses them, and "local" with the guard installed under a
// temporary directory, so that systemd-analyze finds every binary the unit
// names.
func renderNodeFiles(t *testing.T) (deployed, local node) {
	t.Helper()
	root := t.TempDir()
	redisServer := requireProgram(t, "redis-server")
	guardPath := filepath.Join(root, "bin", "redis-restart-guard")
	nodes := render(t, map[string]map[string]any{
		"deployed": {
			"bind_address":      "10.0.1.10",
			"max_lock_ttl":      30,
			"ntp_servers":       []string{"169.254.169.123"},
			"ntp_poll_exponent": 4,
			"client_cidrs":      []string{"10.0.0.0/16"},
			"data_device":       testDataDevice,
			"redlock_password":  testRedlockPassword,
			"monitor_password":  testMonitorPassword,
		},
		"local": {
			"max_lock_ttl":      1,
			"restart_margin":    0.5,
			"acl_enabled":       false,
			"guard_path":        guardPath,
			"redis_server_path": redisServer,
			"data_dir":          filepath.Join(root, "data"),
			"guard_state_dir":   filepath.Join(root, "guard-state"),
			"guard_runtime_dir": filepath.Join(root, "guard-run"),
			"conf_path":         filepath.Join(root, "redis.conf"),
		},
	})
	writeFile(t, root, "bin/redis-restart-guard", nodes["local"].RestartGuard, 0o755)
	return nodes["deployed"], nodes["local"]
}

// TestNodeFilesRealPrograms passes each rendered file to the program that
// reads it on a node. Each check also runs on a broken copy, to prove the
// program really rejects what it should.
func TestNodeFilesRealPrograms(t *testing.T) {
	deployed, local := renderNodeFiles(t)

	t.Run("chronyd -p", func(t *testing.T) {
		chronyd := requireProgram(t, "chronyd")
		for name, n := range map[string]node{"deployed": deployed, "local": local} {
			out, err := runProgram(t, chronyd, "-p", "-f", writeFile(t, t.TempDir(), "chrony.conf", n.ChronyConf, 0o644))
			if err != nil {
				t.Fatalf("%s: chronyd -p rejected chrony.conf: %v\n%s", name, err, out)
			}
			for _, want := range []string{"makestep 1 1", "maxslewrate 500", "leapsecmode slew", "maxchange 10 1 3"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s: chronyd -p printed %q, want it to contain %q", name, out, want)
				}
			}
		}
		broken := strings.Replace(deployed.ChronyConf, "maxslewrate 500", "maxslewrate fast", 1)
		if out, err := runProgram(t, chronyd, "-p", "-f", writeFile(t, t.TempDir(), "chrony.conf", broken, 0o644)); err == nil {
			t.Errorf("control: chronyd -p accepted a broken chrony.conf:\n%s", out)
		}
	})

	t.Run("systemd-analyze verify", func(t *testing.T) {
		analyze := requireProgram(t, "systemd-analyze")
		verify := func(unit string) (string, error) {
			path := writeFile(t, t.TempDir(), local.UnitName, unit, 0o644)
			out, err := runProgram(t, analyze, "verify", path)
			// Unknown keys and bad values are warnings with exit status 0:
			// any line about our unit counts as a failure.
			if err == nil && strings.Contains(out, local.UnitName) {
				return out, errWarned
			}
			return out, err
		}
		if out, err := verify(local.RedisUnit); err != nil {
			t.Fatalf("systemd-analyze verify rejected the unit: %v\n%s\n%s", err, out, local.RedisUnit)
		}
		if out, err := verify(strings.Replace(local.RedisUnit, "RestartSec=", "RestartSecs=", 1)); err == nil {
			t.Errorf("control: systemd-analyze verify accepted an unknown key:\n%s", out)
		}
	})

	t.Run("systemd-fstab-generator", func(t *testing.T) {
		gen := requireProgram(t, "/lib/systemd/system-generators/systemd-fstab-generator")
		generate := func(fstab string) string {
			dir := t.TempDir()
			path := writeFile(t, dir, "fstab", fstab, 0o644)
			out := filepath.Join(dir, "out")
			for _, d := range []string{"out", "early", "late"} {
				if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(gen, out, filepath.Join(dir, "early"), filepath.Join(dir, "late"))
			cmd.Env = append(os.Environ(), "SYSTEMD_FSTAB="+path, "SYSTEMD_PROC_CMDLINE=")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("systemd-fstab-generator rejected %q: %v\n%s", fstab, err, b)
			}
			return out
		}
		out := generate(deployed.FstabLine)
		mount, err := os.ReadFile(filepath.Join(out, "var-lib-redis.mount"))
		if err != nil {
			t.Fatalf("no mount unit for data_dir: %v", err)
		}
		for _, want := range []string{"What=" + testDataDevice + "\n", "Where=/var/lib/redis\n", "Type=ext4\n"} {
			if !strings.Contains(string(mount), want) {
				t.Errorf("var-lib-redis.mount: want %q in\n%s", want, mount)
			}
		}
		for _, want := range []string{
			// nofail: the boot goes on without the volume (Redis does not).
			"local-fs.target.wants/var-lib-redis.mount",
			// formatted when blank, grown to the volume
			`var-lib-redis.mount.requires/systemd-makefs@dev-disk-by\x2did-nvme\x2dAmazon_Elastic_Block_Store_vol0123456789abcdef0.service`,
			"var-lib-redis.mount.wants/systemd-growfs@var-lib-redis.service",
		} {
			if _, err := os.Lstat(filepath.Join(out, want)); err != nil {
				t.Errorf("generated units: want %s: %v", want, err)
			}
		}
		if b, err := os.ReadFile(filepath.Join(out, `dev-disk-by\x2did-nvme\x2dAmazon_Elastic_Block_Store_vol0123456789abcdef0.device.d`, "50-device-timeout.conf")); err != nil || !strings.Contains(string(b), "10min") {
			t.Errorf("device timeout: got %q (%v), want 10min", b, err)
		}
		// Control: without nofail the generator makes the boot require it.
		ctl := generate(strings.Replace(deployed.FstabLine, "nofail,", "", 1))
		if _, err := os.Lstat(filepath.Join(ctl, "local-fs.target.requires", "var-lib-redis.mount")); err != nil {
			t.Errorf("control: without nofail the mount should be required by local-fs.target: %v", err)
		}
	})

	t.Run("cloud-init schema", func(t *testing.T) {
		cloudInit := requireProgram(t, "cloud-init")
		for name, n := range map[string]node{"deployed": deployed, "local": local} {
			path := writeFile(t, t.TempDir(), "user-data", n.CloudInit, 0o600)
			if out, err := runProgram(t, cloudInit, "schema", "--config-file", path); err != nil {
				t.Fatalf("%s: cloud-init schema rejected the user data: %v\n%s", name, err, out)
			}
		}
		broken := strings.Replace(deployed.CloudInit, "defer: true", "defer: maybe", 1)
		path := writeFile(t, t.TempDir(), "user-data", broken, 0o600)
		if out, err := runProgram(t, cloudInit, "schema", "--config-file", path); err == nil {
			t.Errorf("control: cloud-init schema accepted defer: maybe:\n%s", out)
		}
	})

	t.Run("bash -n", func(t *testing.T) {
		bash := requireProgram(t, "bash")
		if out, err := runProgram(t, bash, "-n", writeFile(t, t.TempDir(), "guard", deployed.RestartGuard, 0o755)); err != nil {
			t.Fatalf("bash -n rejected the restart guard: %v\n%s", err, out)
		}
	})
}

// TestCloudInitCarriesFiles decodes the user data with a YAML parser of its
// own and checks that every file reaches the node unchanged and is wired up.
func TestCloudInitCarriesFiles(t *testing.T) {
	deployed, _ := renderNodeFiles(t)
	var doc struct {
		Packages   []string `yaml:"packages"`
		WriteFiles []struct {
			Path        string `yaml:"path"`
			Owner       string `yaml:"owner"`
			Permissions string `yaml:"permissions"`
			Content     string `yaml:"content"`
			Defer       bool   `yaml:"defer"`
			Append      bool   `yaml:"append"`
		} `yaml:"write_files"`
		Runcmd [][]string `yaml:"runcmd"`
	}
	if !strings.HasPrefix(deployed.CloudInit, "#cloud-config\n") {
		t.Fatalf("user data starts %q, want #cloud-config", deployed.CloudInit[:min(40, len(deployed.CloudInit))])
	}
	if err := yaml.Unmarshal([]byte(deployed.CloudInit), &doc); err != nil {
		t.Fatalf("decode user data: %v", err)
	}
	files := map[string]string{
		"/etc/redis/redlock.conf":                                 deployed.RedisConf,
		"/etc/chrony/chrony.conf":                                 deployed.ChronyConf,
		"/etc/systemd/system/chrony.service.d/redlock-redis.conf": deployed.ChronyDropin,
		"/etc/sysctl.d/60-redlock-redis.conf":                     deployed.SysctlConf,
		"/etc/fstab":                                              deployed.FstabLine,
		"/etc/systemd/system/redlock-redis.service":               deployed.RedisUnit,
		"/usr/local/sbin/redis-restart-guard":                     deployed.RestartGuard,
		"/etc/tmpfiles.d/redlock-redis.conf":                      deployed.TmpfilesConf,
	}
	seen := map[string]bool{}
	for _, f := range doc.WriteFiles {
		want, ok := files[f.Path]
		if !ok {
			t.Errorf("write_files: unexpected %s", f.Path)
			continue
		}
		seen[f.Path] = true
		if (f.Path == "/etc/fstab") != f.Append {
			t.Errorf("write_files %s: append = %v; only /etc/fstab is appended to", f.Path, f.Append)
		}
		if f.Content != want {
			t.Errorf("write_files %s: content differs from the rendered file:\ngot:\n%s\nwant:\n%s", f.Path, f.Content, want)
		}
	}
	for path := range files {
		if !seen[path] {
			t.Errorf("write_files: %s missing", path)
		}
	}
	for _, pkg := range []string{"redis-server", "chrony"} {
		if !slices.Contains(doc.Packages, pkg) {
			t.Errorf("packages: got %v, want %s", doc.Packages, pkg)
		}
	}
	var cmds []string
	for _, c := range doc.Runcmd {
		cmds = append(cmds, strings.Join(c, " "))
	}
	// Order matters: Debian's Redis and timesyncd go before ours starts.
	order := []string{
		"systemctl mask redis-server.service",
		"systemctl mask systemd-timesyncd.service",
		"systemctl daemon-reload",
		"systemctl restart chrony.service",
		"systemctl restart systemd-sysctl.service",
		"systemctl enable --now --no-block redlock-redis.service",
	}
	last := -1
	for _, want := range order {
		i := slices.Index(cmds, want)
		if i < 0 {
			t.Errorf("runcmd: got %q, want it to contain %q", cmds, want)
			continue
		}
		if i < last {
			t.Errorf("runcmd: %q runs too early in %q", want, cmds)
		}
		last = i
	}
}

// errWarned marks a systemd-analyze run that exited 0 but warned about the unit.
var errWarned = errors.New("verify: systemd-analyze warned about the unit")

// runProgram runs a checker and returns its combined output.
func runProgram(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

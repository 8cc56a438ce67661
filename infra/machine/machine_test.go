package machine

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/proc"
	"github.com/redlocklab/redlocklab/internal/testenv"
)

func TestRecipeKey(t *testing.T) {
	base := theRecipe.key()
	if len(base) != 16 || strings.Trim(base, "0123456789abcdef") != "" {
		t.Fatalf("key %q: want 16 hex digits", base)
	}
	if again := theRecipe.key(); again != base {
		t.Errorf("key changed between calls: %s, then %s", base, again)
	}
	withFile := theRecipe
	withFile.Files = map[string]string{}
	for k, v := range theRecipe.Files {
		withFile.Files[k] = v
	}
	withFile.Files["/etc/default/chrony"] += "# changed\n"
	withPackage := theRecipe
	withPackage.Packages = append(slices.Clone(theRecipe.Packages), "curl")
	for name, r := range map[string]recipe{"a file": withFile, "a package": withPackage} {
		if r.key() == base {
			t.Errorf("changing %s kept the key %s: the old image would be reused", name, base)
		}
	}
}

func TestArgv(t *testing.T) {
	cases := []struct {
		name string
		got  []string
		want string
	}{
		{"debootstrap", debootstrapArgs(theRecipe, "/c/img.partial", "http://mirror/debian"),
			"debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus bookworm /c/img.partial http://mirror/debian"},
		{"nspawn", nspawnArgs("/m/root", "--pipe", "--", "true"),
			"systemd-nspawn --quiet --register=no --keep-unit --directory=/m/root --pipe -- true"},
		{"boot", (&Machine{cfg: Config{Name: "node-1"}, merged: "/m/root"}).bootArgs(),
			"systemd-nspawn --quiet --register=no --keep-unit --directory=/m/root --boot --machine=node-1 --console=read-only --link-journal=no"},
		{"boot with a bind", (&Machine{cfg: Config{Name: "node-1", Binds: []Bind{{Host: "/n/redis-data", Path: "/var/lib/redis"}}}, merged: "/m/root"}).bootArgs(),
			"systemd-nspawn --quiet --register=no --keep-unit --directory=/m/root --boot --machine=node-1 --console=read-only --link-journal=no --bind=/n/redis-data:/var/lib/redis"},
		{"exec", execArgs(4242, "systemctl", "is-active", "x.service"),
			"nsenter --target 4242 --all --root --wd -- /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 SYSTEMD_COLORS=0 SYSTEMD_PAGER= systemctl is-active x.service"},
	}
	for _, c := range cases {
		if got := strings.Join(c.got, " "); got != c.want {
			t.Errorf("%s argv:\ngot  %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestMountPoints(t *testing.T) {
	info := "22 1 8:1 / / rw,relatime - ext4 /dev/vda rw\n" +
		"90 22 0:50 / /var/cache/m/img.partial/proc rw - proc proc rw\n" +
		"91 22 0:51 / /tmp/a\\040b/root rw - overlay overlay rw,lowerdir=/x\n" +
		"\n"
	got := mountPoints([]byte(info))
	want := []string{"/", "/var/cache/m/img.partial/proc", "/tmp/a b/root"}
	if !slices.Equal(got, want) {
		t.Errorf("mount points: got %q, want %q", got, want)
	}
}

func TestNewRefusesBadConfigs(t *testing.T) {
	img := Image{Dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(img.Dir, imageMarker), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := Config{Name: "node-1", Image: img, Dir: t.TempDir(), UserData: []byte("#cloud-config\n")}
	if _, err := New(good); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mutate := range map[string]func(c *Config){
		"upper-case name":    func(c *Config) { c.Name = "Node1" },
		"empty name":         func(c *Config) { c.Name = "" },
		"image not built":    func(c *Config) { c.Image = Image{Dir: t.TempDir()} },
		"relative dir":       func(c *Config) { c.Dir = "machines/node-1" },
		"comma in dir":       func(c *Config) { c.Dir = "/tmp/a,b" },
		"no user data":       func(c *Config) { c.UserData = nil },
		"newline in the id":  func(c *Config) { c.InstanceID = "i-1\nlocal-hostname: x" },
		"quote in the id":    func(c *Config) { c.InstanceID = `i-"1` },
		"colon in the image": func(c *Config) { c.Dir = "/tmp/a:b" },
		"relative bind":      func(c *Config) { c.Binds = []Bind{{Host: "data", Path: "/var/lib/redis"}} },
		"colon in a bind":    func(c *Config) { c.Binds = []Bind{{Host: "/a:b", Path: "/var/lib/redis"}} },
	} {
		c := good
		mutate(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: New accepted %+v", name, c)
		}
	}
}

// helperEnv makes this test binary boot a machine and wait to be killed.
const helperEnv = "REDLAB_MACHINE_TEST_HELPER"

// TestMachineDiesWithItsStarter boots a machine in a helper process, kills
// that process with SIGKILL (no cleanup runs) and expects the machine to be
// gone with it: a test that panics or times out leaves no container behind.
func TestMachineDiesWithItsStarter(t *testing.T) {
	if dir := os.Getenv(helperEnv); dir != "" {
		bootAndWait(t, dir)
		return
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "booting a machine needs root (debootstrap, overlay mounts, systemd-nspawn)")
	}
	for _, prog := range []string{"debootstrap", "systemd-nspawn", "nsenter"} {
		if _, err := lookPath(prog); err != nil {
			testenv.Missing(t, err.Error())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if _, err := EnsureImage(ctx, ImageConfig{}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	t.Cleanup(func() {
		if err := unmountUnder(filepath.Join(dir, "root")); err != nil {
			t.Error(err)
		}
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(self, "-test.run", "^TestMachineDiesWithItsStarter$", "-test.v")
	helper.Env = append(os.Environ(), helperEnv+"="+dir)
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = helper.Process.Kill()
		_ = helper.Wait()
	})
	leader := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "leader="); ok {
			leader, _ = strconv.Atoi(v)
			break
		}
	}
	if leader == 0 {
		t.Fatalf("the helper printed no leader PID (%v); console:\n%s", sc.Err(), tail(filepath.Join(dir, "console.log"), 30))
	}
	if !proc.Alive(leader) {
		t.Fatalf("leader %d is not running before the kill", leader)
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for proc.Alive(leader) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(leader, syscall.SIGKILL)
			t.Fatalf("the machine's systemd (PID %d) outlived the process that booted it by 30 s", leader)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// bootAndWait is the helper: boot, print the leader's PID, wait for SIGKILL.
func bootAndWait(t *testing.T, dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := EnsureImage(ctx, ImageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Name: "redlock-orphan-test", Image: img, Dir: dir, UserData: []byte("#cloud-config\n")})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := m.Exec(ctx, "systemctl", "is-system-running")
	if !systemState(out) {
		t.Fatalf("Exec: %q, %v", out, err)
	}
	fmt.Printf("leader=%d\n", m.Leader())
	<-ctx.Done() // killed long before
}

package machine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/internal/flock"
)

// DefaultCacheDir holds the built images, one directory per recipe hash.
// $REDLAB_MACHINE_CACHE overrides it.
const DefaultCacheDir = "/var/cache/redlock-lab/machines"

// The Debian archive debootstrap and APT download from is
// $REDLAB_DEBIAN_MIRROR, else the host's own (HostMirror): whatever archive
// the host installs its packages from, so an image builds wherever the host
// can install packages.

// imageMarker is written last into a finished image: a directory without it
// is a build that did not complete.
const imageMarker = ".redlock-image.json"

// recipe is everything that goes into an image; its hash names the image, so
// changing any part of it builds a new one. The mirror is not part of it: any
// mirror serves the same suite.
type recipe struct {
	Version  int               `json:"version"`
	Suite    string            `json:"suite"`
	Base     []string          `json:"base"`     // debootstrap --include
	Packages []string          `json:"packages"` // apt-get install, which resolves virtual packages
	Files    map[string]string `json:"files"`    // written after the packages, path -> content
	Remove   []string          `json:"remove"`   // unit symlinks and files taken out
}

// cloudImagePackages are what a Debian 12 cloud image (the image modules/aws
// boots) carries beyond debootstrap's minbase and a node uses: cloud-init,
// which runs the user data; openssh-server, the way in for the faults over
// SSH; and, of the base system's priority-important packages, iproute2 (ip,
// tc) and procps. e2fsprogs is priority required, in minbase already, named
// for the data volume's mkfs.
var cloudImagePackages = []string{"cloud-init", "openssh-server", "iproute2", "procps", "e2fsprogs"}

// userDataPackages are the packages the node's user data installs on a VM
// (the "packages:" infra/modules/redis-node renders, without
// extra_packages). A machine's APT has no sources, so the image carries
// them and cloud-init finds them installed; nothing else is preinstalled,
// so a program the user data forgets is missing in the lab as on a VM.
// infra/verify checks the list against the rendered user data.
var userDataPackages = []string{"redis-server", "chrony", "iptables", "python3"}

// UserDataPackages returns the packages a machine's image carries because
// the node's user data installs them (see the package documentation).
func UserDataPackages() []string { return slices.Clone(userDataPackages) }

// theRecipe is the Debian 12 node: a Debian cloud image with the packages
// the user data of infra/modules/redis-node installs, and nothing more, with
// the container differences of the package documentation.
var theRecipe = recipe{
	Version: 3,
	Suite:   "bookworm",
	Base:    []string{"systemd", "systemd-sysv", "dbus"},
	// debootstrap alone cannot resolve cloud-init's dependencies (it does
	// not follow virtual packages), so apt-get installs them in a second step.
	Packages: slices.Concat(cloudImagePackages, userDataPackages),
	Files: map[string]string{
		"/etc/cloud/cloud.cfg.d/90-redlock-machine.cfg": "# A machine of infra/machine: the NoCloud seed is the only data source,\n" +
			"# the network is the host's (nothing to configure), and no locale to generate.\n" +
			"datasource_list: [ NoCloud ]\n" +
			"network: {config: disabled}\n" +
			"locale: C.UTF-8\n" +
			"# The host key and root's authorized key are the lab's (Config.Files),\n" +
			"# written before the first boot: cloud-init neither replaces nor wraps them.\n" +
			"ssh_deletekeys: false\n" +
			"ssh_genkeytypes: []\n" +
			"disable_root: false\n",
		"/etc/default/chrony": "# infra/machine: -x, chronyd synchronises but never sets the clock, which is the host's.\n" +
			"DAEMON_OPTS=\"-F 1 -x\"\n",
		"/etc/systemd/system/chrony.service.d/10-redlock-machine.conf": "# infra/machine: a container has no CAP_SYS_TIME, and chronyd runs with -x.\n" +
			"[Unit]\nConditionCapability=\n",
		"/etc/systemd/system/ssh.service.d/10-redlock-machine.conf": "# infra/machine: sshd runs only on a machine given a host key of its own\n" +
			"# (the image's were removed: machines must not share one).\n" +
			"[Unit]\nConditionPathExists=/etc/ssh/ssh_host_ed25519_key\n",
		"/etc/apt/sources.list": "",
		"/etc/machine-id":       "",
	},
	Remove: []string{
		"/etc/systemd/system/multi-user.target.wants/redis-server.service",
		"/etc/systemd/system/redis.service",
		"/etc/systemd/system/getty.target.wants/getty@tty1.service",
		"/etc/systemd/system/timers.target.wants/apt-daily.timer",
		"/etc/systemd/system/timers.target.wants/apt-daily-upgrade.timer",
		"/etc/systemd/system/timers.target.wants/dpkg-db-backup.timer",
		"/etc/systemd/system/timers.target.wants/e2scrub_all.timer",
		"/etc/systemd/system/timers.target.wants/fstrim.timer",
		// openssh-server's postinst made these; every machine from the image
		// would share them.
		"/etc/ssh/ssh_host_rsa_key", "/etc/ssh/ssh_host_rsa_key.pub",
		"/etc/ssh/ssh_host_ecdsa_key", "/etc/ssh/ssh_host_ecdsa_key.pub",
		"/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_ed25519_key.pub",
	},
}

// key is the recipe's hash, short enough for a directory name.
func (r recipe) key() string {
	b, err := json.Marshal(r) // map keys are sorted: the encoding is stable
	if err != nil {
		panic(err) // strings, slices and a map of strings always encode
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Image is a built Debian root file system. It is shared read-only by every
// Machine booted from it.
type Image struct {
	// Dir is the root file system.
	Dir string
	// Key is the hash of the recipe it was built from.
	Key string
}

// ImageConfig says where images are kept and built from. Zero fields take
// the defaults.
type ImageConfig struct {
	// CacheDir holds the images; default $REDLAB_MACHINE_CACHE, else
	// DefaultCacheDir.
	CacheDir string
	// Mirror is the Debian archive; default $REDLAB_DEBIAN_MIRROR, else the
	// host's (HostMirror), looked up only when an image must be built.
	Mirror string
	// Log receives one line when a build starts and one when it ends, and
	// where its output is kept; nil discards them.
	Log io.Writer
}

func (c ImageConfig) withDefaults() ImageConfig {
	if c.CacheDir == "" {
		c.CacheDir = os.Getenv("REDLAB_MACHINE_CACHE")
	}
	if c.CacheDir == "" {
		c.CacheDir = DefaultCacheDir
	}
	if c.Mirror == "" {
		c.Mirror = os.Getenv("REDLAB_DEBIAN_MIRROR")
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// ErrNotRoot is returned when building or booting is attempted without root:
// debootstrap, mounts and systemd-nspawn all need it.
var ErrNotRoot = errors.New("machine: needs root (debootstrap, overlay mounts and systemd-nspawn)")

// EnsureImage returns the image of the current recipe, building it first
// when the cache does not hold it. Concurrent callers, in this process or
// others, wait for one build. A build needs debootstrap, systemd-nspawn and
// Debian's archive; it takes about a minute on an idle machine.
func EnsureImage(ctx context.Context, cfg ImageConfig) (Image, error) {
	cfg = cfg.withDefaults()
	if !filepath.IsAbs(cfg.CacheDir) || strings.ContainsAny(cfg.CacheDir, ",:") {
		return Image{}, fmt.Errorf("machine: cache dir %q: want an absolute path without ',' or ':' (it becomes an overlay lowerdir)", cfg.CacheDir)
	}
	if os.Geteuid() != 0 {
		return Image{}, ErrNotRoot
	}
	key := theRecipe.key()
	img := Image{Dir: filepath.Join(cfg.CacheDir, "debian-"+theRecipe.Suite+"-"+key), Key: key}
	if built(img.Dir) {
		return img, nil
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return Image{}, fmt.Errorf("machine: %w", err)
	}
	unlock, err := flock.Lock(ctx, filepath.Join(cfg.CacheDir, ".lock"))
	if err != nil {
		return Image{}, fmt.Errorf("machine: image cache: %w", err)
	}
	defer unlock()
	if built(img.Dir) { // another process built it while we waited
		return img, nil
	}
	if err := build(ctx, cfg, img); err != nil {
		return Image{}, err
	}
	return img, nil
}

func built(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, imageMarker))
	return err == nil
}

// build makes the image in a sibling directory and renames it into place
// only when it is complete.
func build(ctx context.Context, cfg ImageConfig, img Image) (err error) {
	for _, prog := range []string{"debootstrap", "systemd-nspawn"} {
		if _, err := lookPath(prog); err != nil {
			return err
		}
	}
	if cfg.Mirror == "" {
		if cfg.Mirror, err = HostMirror("/"); err != nil {
			return err
		}
	}
	tmp := img.Dir + ".partial"
	logPath := img.Dir + ".log"
	if err := discard(tmp); err != nil {
		return err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("machine: %w", err)
	}
	defer logFile.Close()
	defer func() {
		if err != nil {
			if derr := discard(tmp); derr != nil {
				err = errors.Join(err, derr)
			}
		}
	}()
	start := time.Now()
	fmt.Fprintf(cfg.Log, "machine: building the Debian %s image %s from %s (once per host; output in %s)\n",
		theRecipe.Suite, img.Key, cfg.Mirror, logPath)

	steps := [][]string{
		debootstrapArgs(theRecipe, tmp, cfg.Mirror),
		nspawnArgs(tmp, "--pipe", "--setenv=DEBIAN_FRONTEND=noninteractive", "--", "/bin/sh", "-c",
			"apt-get install -y -q --no-install-recommends "+strings.Join(theRecipe.Packages, " ")+" && apt-get clean"),
	}
	for _, argv := range steps {
		if err := runLogged(ctx, logFile, logPath, argv); err != nil {
			return err
		}
	}
	if err := customise(tmp, theRecipe); err != nil {
		return err
	}
	rec, _ := json.MarshalIndent(theRecipe, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, imageMarker), append(rec, '\n'), 0o644); err != nil {
		return fmt.Errorf("machine: %w", err)
	}
	if err := os.Rename(tmp, img.Dir); err != nil {
		return fmt.Errorf("machine: %w", err)
	}
	fmt.Fprintf(cfg.Log, "machine: built %s in %s\n", img.Dir, time.Since(start).Round(time.Second))
	return nil
}

// debootstrapArgs is the first build step: a minimal Debian with systemd.
func debootstrapArgs(r recipe, dir, mirror string) []string {
	return []string{"debootstrap", "--variant=minbase", "--include=" + strings.Join(r.Base, ","), r.Suite, dir, mirror}
}

// customise writes the recipe's files and removes its symlinks; APT's
// package lists go too (APT has no sources left to refresh them from).
func customise(root string, r recipe) error {
	paths := make([]string, 0, len(r.Files))
	for p := range r.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("machine: %w", err)
		}
		if err := os.WriteFile(full, []byte(r.Files[p]), 0o644); err != nil {
			return fmt.Errorf("machine: %w", err)
		}
	}
	for _, p := range r.Remove {
		if err := os.Remove(filepath.Join(root, p)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("machine: %w", err)
		}
	}
	lists, err := filepath.Glob(filepath.Join(root, "var/lib/apt/lists/*_*"))
	if err != nil {
		return fmt.Errorf("machine: %w", err)
	}
	for _, l := range lists {
		if err := os.Remove(l); err != nil {
			return fmt.Errorf("machine: %w", err)
		}
	}
	return nil
}

// runLogged runs one build step with its output appended to the build log;
// a failure quotes the log's end.
func runLogged(ctx context.Context, log *os.File, logPath string, argv []string) error {
	fmt.Fprintf(log, "+ %s\n", strings.Join(argv, " "))
	cmd := command(ctx, argv)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("machine: build step %s: %w; the end of %s:\n%s", argv[0], err, logPath, tail(logPath, 20))
	}
	return nil
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// discard removes a directory and whatever a failed build left mounted in it
// (debootstrap mounts /proc and /sys into its target).
func discard(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("machine: %w", err)
	}
	return nil
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("machine: %w", err)
	}
	var points []string
	for _, p := range mountPoints(data) {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("machine: unmount %s: %w", p, err)
		}
	}
	return nil
}

// mountPoints parses /proc/self/mountinfo: the fifth field of each line,
// with the kernel's octal escapes (\040 for a space) undone.
func mountPoints(mountinfo []byte) []string {
	var out []string
	for _, line := range bytes.Split(mountinfo, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) < 5 {
			continue
		}
		out = append(out, unescapeOctal(f[4]))
	}
	return out
}

func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// lookPath finds a program, also in the sbin directories a non-login root
// shell may lack.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("machine: %s is not installed (Debian: apt-get install %s): %w", name, packageOf(name), exec.ErrNotFound)
}

func packageOf(prog string) string {
	switch prog {
	case "systemd-nspawn":
		return "systemd-container"
	case "nsenter":
		return "util-linux"
	}
	return prog
}

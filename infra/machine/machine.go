package machine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redlocklab/redlocklab/internal/proc"
)

// Config describes one machine.
type Config struct {
	// Name is the machine's name and host name: lowercase letters, digits
	// and '-', at most 63 characters.
	Name string
	// Image is the root file system it boots (read-only, shared).
	Image Image
	// Dir is the machine's own directory: its disk (the overlay's upper
	// layer), the mounted root and console.log. It must exist and be empty
	// before the first Start, and stay until Close.
	Dir string
	// UserData is the cloud-init user data, as the instance would receive it
	// (a #cloud-config document, or the same gzipped).
	UserData []byte
	// InstanceID is the cloud-init instance id; default Name. cloud-init runs
	// the user data once per instance id: a second Start is a reboot.
	InstanceID string
	// NetNS, when set, is the path of a network namespace (/run/netns/NAME)
	// the machine runs in instead of the host's: its owner creates it, with
	// the interfaces and addresses the machine gets, before Start, and
	// removes it after Close.
	NetNS string
	// Files are written into the machine's root before its first boot, by
	// absolute path (a host key, an authorized key, a configuration
	// drop-in), with their parent directories (mode 0755, or 0700 below
	// /root). A later Start leaves them as the machine left them.
	Files map[string]File
	// Binds are host directories the machine sees at paths of its own, as
	// data volumes (systemd-nspawn --bind). Each boot binds what is mounted
	// at the host directory then.
	Binds []Bind
}

// File is one file of Config.Files.
type File struct {
	Data []byte
	Mode os.FileMode
}

// Bind is a host directory (Host) seen inside the machine at Path. Both
// are absolute, without ',' or ':'.
type Bind struct {
	Host, Path string
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Machine is a container booted with `systemd-nspawn --boot`. Start boots it,
// PowerCut kills it without warning, Shutdown powers it off; Start again
// boots the same disk. Close stops it, whatever its state, and unmounts its
// root; it is idempotent.
type Machine struct {
	cfg    Config
	merged string

	mu      sync.Mutex
	mounted bool
	seeded  bool
	run     *boot // nil when not running
	closed  bool
}

// boot is one run of systemd-nspawn, from Start to its exit.
type boot struct {
	cmd    *exec.Cmd
	leader int           // the container's systemd, as this host sees it
	done   chan struct{} // closed when systemd-nspawn has exited
	err    error         // its exit status, once done is closed
}

// New checks cfg and returns a machine that is not started. Nothing happens
// on the host until Start.
func New(cfg Config) (*Machine, error) {
	if !nameRE.MatchString(cfg.Name) {
		return nil, fmt.Errorf("machine: name %q: want lowercase letters, digits and '-', at most 63", cfg.Name)
	}
	if cfg.Image.Dir == "" || !built(cfg.Image.Dir) {
		return nil, fmt.Errorf("machine: %s: image %q is not built (EnsureImage)", cfg.Name, cfg.Image.Dir)
	}
	if !filepath.IsAbs(cfg.Dir) || strings.ContainsAny(cfg.Dir, ",:") {
		return nil, fmt.Errorf("machine: %s: dir %q: want an absolute path without ',' or ':'", cfg.Name, cfg.Dir)
	}
	if len(cfg.UserData) == 0 {
		return nil, fmt.Errorf("machine: %s: no user data", cfg.Name)
	}
	if cfg.InstanceID == "" {
		cfg.InstanceID = cfg.Name
	}
	for _, b := range cfg.Binds {
		for _, p := range []string{b.Host, b.Path} {
			if !filepath.IsAbs(p) || strings.ContainsAny(p, ",:") {
				return nil, fmt.Errorf("machine: %s: bind %q: want absolute paths without ',' or ':'", cfg.Name, b.Host+":"+b.Path)
			}
		}
	}
	if strings.ContainsAny(cfg.InstanceID, "\n\"'") {
		return nil, fmt.Errorf("machine: %s: instance id %q has a newline or a quote", cfg.Name, cfg.InstanceID)
	}
	if cfg.NetNS != "" && (!filepath.IsAbs(cfg.NetNS) || strings.ContainsAny(cfg.NetNS, ",: ")) {
		return nil, fmt.Errorf("machine: %s: network namespace %q: want an absolute path such as /run/netns/NAME", cfg.Name, cfg.NetNS)
	}
	for p := range cfg.Files {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
			return nil, fmt.Errorf("machine: %s: file %q: want a clean absolute path inside the machine", cfg.Name, p)
		}
	}
	return &Machine{cfg: cfg, merged: filepath.Join(cfg.Dir, "root")}, nil
}

// Name is the machine's name.
func (m *Machine) Name() string { return m.cfg.Name }

// Console is the file that receives the machine's console (boot messages).
func (m *Machine) Console() string { return filepath.Join(m.cfg.Dir, "console.log") }

// nspawnArgs is the argv of systemd-nspawn on root: not registered with
// machined and in the caller's own cgroup (the host need not run systemd),
// with the host's network unless extra names a namespace.
func nspawnArgs(root string, extra ...string) []string {
	return append([]string{"systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--directory=" + root}, extra...)
}

// bootArgs is the argv that boots the machine.
func (m *Machine) bootArgs() []string {
	extra := []string{"--boot", "--machine=" + m.cfg.Name, "--console=read-only", "--link-journal=no"}
	if m.cfg.NetNS != "" {
		// Its own namespace, so CAP_NET_ADMIN is its own too: iptables and
		// tc inside act on the machine's interfaces only.
		extra = append(extra, "--network-namespace-path="+m.cfg.NetNS, "--capability=CAP_NET_ADMIN")
	}
	return nspawnArgs(m.merged, append(extra, bindArgs(m.cfg.Binds)...)...)
}

// bindArgs are the systemd-nspawn options of binds.
func bindArgs(binds []Bind) []string {
	var out []string
	for _, b := range binds {
		out = append(out, "--bind="+b.Host+":"+b.Path)
	}
	return out
}

// command runs argv as PID 1 of a new PID namespace that dies with the
// calling process: when this process ends, however it ends, the kernel kills
// systemd-nspawn, and with it every process of its namespace, the booted
// container included (killing systemd-nspawn alone would leave the
// container running).
func command(ctx context.Context, argv []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID,
		Pdeathsig:  syscall.SIGKILL,
	}
	return cmd
}

// Start boots the machine and returns once its systemd answers. The first
// Start mounts the machine's root and writes the NoCloud seed; a later one
// boots the same disk again. ctx bounds the boot only: the machine runs
// until PowerCut, Shutdown or Close.
func (m *Machine) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return fmt.Errorf("machine: %s: closed", m.cfg.Name)
	case m.run != nil:
		return fmt.Errorf("machine: %s: already running", m.cfg.Name)
	case os.Geteuid() != 0:
		return ErrNotRoot
	}
	for _, prog := range []string{"systemd-nspawn", "nsenter"} {
		if _, err := lookPath(prog); err != nil {
			return err
		}
	}
	if err := m.mount(); err != nil {
		return err
	}
	if err := m.seed(); err != nil {
		return err
	}
	console, err := os.OpenFile(m.Console(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("machine: %w", err)
	}
	defer console.Close() // the child holds its own descriptor
	fmt.Fprintf(console, "\n=== machine %s: boot at %s\n", m.cfg.Name, time.Now().Format(time.RFC3339Nano))
	// Not CommandContext's ctx: the machine outlives Start's context.
	cmd := command(context.Background(), m.bootArgs())
	cmd.Stdout, cmd.Stderr = console, console
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("machine: %s: start systemd-nspawn: %w", m.cfg.Name, err)
	}
	b := &boot{cmd: cmd, done: make(chan struct{})}
	go func() { // owned by the boot; ends when systemd-nspawn exits
		b.err = cmd.Wait()
		close(b.done)
	}()
	m.run = b
	if err := m.waitBooted(ctx, b); err != nil {
		m.killLocked(b)
		m.run = nil
		return err
	}
	return nil
}

// waitBooted finds the container's systemd and waits until systemctl
// reaches it.
func (m *Machine) waitBooted(ctx context.Context, b *boot) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if b.leader == 0 {
			b.leader = findLeader(b.cmd.Process.Pid)
		}
		if b.leader != 0 {
			out, _ := m.execIn(ctx, b.leader, "systemctl", "is-system-running")
			if systemState(out) {
				return nil
			}
		}
		select {
		case <-b.done:
			return fmt.Errorf("machine: %s: systemd-nspawn exited during boot (%v); console:\n%s", m.cfg.Name, b.err, tail(m.Console(), 30))
		case <-ctx.Done():
			return fmt.Errorf("machine: %s: boot: %w; console:\n%s", m.cfg.Name, ctx.Err(), tail(m.Console(), 30))
		case <-tick.C:
		}
	}
}

// systemState reports whether out is a state `systemctl is-system-running`
// prints once the manager answers.
func systemState(out string) bool {
	switch strings.TrimSpace(out) {
	case "initializing", "starting", "running", "degraded", "maintenance", "stopping":
		return true
	}
	return false
}

// findLeader returns the container's init: the child of systemd-nspawn
// (pid, in this host's view) that runs systemd, or 0.
func findLeader(pid int) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			child, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child)); err == nil && strings.TrimSpace(string(comm)) == "systemd" {
				return child
			}
		}
	}
	return 0
}

// mount puts the machine's root together: the image below, the machine's
// disk on top.
func (m *Machine) mount() error {
	if m.mounted {
		return nil
	}
	for _, d := range []string{"disk", "work", "root"} {
		if err := os.MkdirAll(filepath.Join(m.cfg.Dir, d), 0o755); err != nil {
			return fmt.Errorf("machine: %w", err)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", m.cfg.Image.Dir, filepath.Join(m.cfg.Dir, "disk"), filepath.Join(m.cfg.Dir, "work"))
	if err := syscall.Mount("overlay", m.merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("machine: %s: mount the root (overlay %s): %w", m.cfg.Name, opts, err)
	}
	m.mounted = true
	return nil
}

// seed writes the NoCloud seed, once: cloud-init reads the user data from it.
func (m *Machine) seed() error {
	if m.seeded {
		return nil
	}
	dir := filepath.Join(m.merged, "var/lib/cloud/seed/nocloud")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("machine: %w", err)
	}
	meta := fmt.Sprintf("instance-id: %q\nlocal-hostname: %s\n", m.cfg.InstanceID, m.cfg.Name)
	for name, data := range map[string][]byte{"user-data": m.cfg.UserData, "meta-data": []byte(meta)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return fmt.Errorf("machine: %w", err)
		}
	}
	for p, f := range m.cfg.Files {
		full := filepath.Join(m.merged, p)
		mode := os.FileMode(0o755)
		if strings.HasPrefix(p, "/root/") {
			mode = 0o700
		}
		if err := os.MkdirAll(filepath.Dir(full), mode); err != nil {
			return fmt.Errorf("machine: %w", err)
		}
		if err := os.WriteFile(full, f.Data, f.Mode); err != nil {
			return fmt.Errorf("machine: %w", err)
		}
		if err := os.Chmod(full, f.Mode); err != nil { // WriteFile's mode passes the umask
			return fmt.Errorf("machine: %w", err)
		}
	}
	m.seeded = true
	return nil
}

// ErrNotRunning is returned by Exec, PowerCut and Shutdown on a machine that
// is not running.
var ErrNotRunning = errors.New("machine: not running")

// Leader returns the PID, in this host's view, of the machine's systemd, or
// 0 when it is not running.
func (m *Machine) Leader() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.run == nil {
		return 0
	}
	select {
	case <-m.run.done:
		return 0
	default:
		return m.run.leader
	}
}

// Exec runs a program inside the running machine (all its namespaces, its
// root, a clean environment) and returns its standard output. A program that
// fails returns its output too, with an *ExitError.
func (m *Machine) Exec(ctx context.Context, args ...string) (string, error) {
	leader := m.Leader()
	if leader == 0 {
		return "", fmt.Errorf("%w: %s", ErrNotRunning, m.cfg.Name)
	}
	return m.execIn(ctx, leader, args...)
}

// ExitError is a program run by Exec that failed.
type ExitError struct {
	Args   []string
	Code   int // -1 when it did not exit normally
	Stderr string
	Err    error
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("machine: %s: exit %d: %v: %s", strings.Join(e.Args, " "), e.Code, e.Err, strings.TrimSpace(e.Stderr))
}

func (e *ExitError) Unwrap() error { return e.Err }

// execArgs is the nsenter argv that runs args inside the machine led by
// leader.
func execArgs(leader int, args ...string) []string {
	return append([]string{
		"nsenter", "--target", strconv.Itoa(leader), "--all", "--root", "--wd", "--",
		"/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8", "SYSTEMD_COLORS=0", "SYSTEMD_PAGER=",
	}, args...)
}

func (m *Machine) execIn(ctx context.Context, leader int, args ...string) (string, error) {
	if len(args) == 0 {
		return "", fmt.Errorf("machine: %s: exec: no program", m.cfg.Name)
	}
	argv := execArgs(leader, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		code := -1
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		}
		return stdout.String(), &ExitError{Args: args, Code: code, Stderr: stderr.String(), Err: err}
	}
	return stdout.String(), nil
}

// PowerCut kills the machine at once, as pulling its plug would: no unit
// stops, nothing is flushed by the machine (what its processes already wrote
// stays in the host's page cache, as it would on a VM's disk after a crash of
// the guest only). It returns when systemd-nspawn has exited.
func (m *Machine) PowerCut(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.run
	if b == nil {
		return fmt.Errorf("%w: %s", ErrNotRunning, m.cfg.Name)
	}
	if b.leader != 0 {
		_ = syscall.Kill(b.leader, syscall.SIGKILL)
	}
	_ = b.cmd.Process.Kill() // PID 1 of its namespace: takes every process left with it
	select {
	case <-b.done:
	case <-ctx.Done():
		return fmt.Errorf("machine: %s: power cut: %w", m.cfg.Name, ctx.Err())
	}
	m.run = nil
	return nil
}

// Shutdown powers the machine off in order (units stopped, file systems
// synced), as `systemctl poweroff` would, and returns when it is off. When
// ctx ends first, it cuts the power instead and returns ctx's error.
func (m *Machine) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.run
	if b == nil {
		return fmt.Errorf("%w: %s", ErrNotRunning, m.cfg.Name)
	}
	// systemd-nspawn turns SIGTERM into an orderly poweroff of the container.
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
		m.run = nil
		return nil
	case <-ctx.Done():
		m.killLocked(b)
		m.run = nil
		return fmt.Errorf("machine: %s: shutdown: %w (power cut instead)", m.cfg.Name, ctx.Err())
	}
}

// killLocked kills a boot and waits for systemd-nspawn to exit.
func (m *Machine) killLocked(b *boot) {
	_ = b.cmd.Process.Kill()
	<-b.done
}

// Close stops the machine (an orderly shutdown of up to 30 seconds, then a
// power cut) and unmounts its root. The machine's directory stays, for its
// owner to remove. Close is idempotent.
func (m *Machine) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	running := m.run != nil
	m.mu.Unlock()
	var errs []error
	if running {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := m.Shutdown(ctx); err != nil && !errors.Is(err, ErrNotRunning) {
			errs = append(errs, err)
		}
		cancel()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.mounted {
		if err := unmountUnder(m.merged); err != nil {
			errs = append(errs, err)
		} else {
			m.mounted = false
		}
	}
	return errors.Join(errs...)
}

// Sweep ends what a Machine whose owner died without Close left in dir (its
// Config.Dir): the systemd-nspawn booted on dir/root, which takes its
// container with it, and every mount under dir. Nothing else on the host is
// touched. A directory with nothing left is fine.
func Sweep(ctx context.Context, dir string) error {
	root := filepath.Join(dir, "root")
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(argv), "\x00"), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "systemd-nspawn" && slices.Contains(args, "--directory="+root) {
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		// PID 1 of its own namespace (see command): its container goes too.
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range pids {
		for proc.Alive(pid) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("machine: sweep %s: systemd-nspawn %d: %w", dir, pid, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return unmountUnder(dir)
}

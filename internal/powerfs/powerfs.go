// Package powerfs is a FUSE passthrough that knows what a disk would keep
// after a power cut: only what the programs above it fsynced. It follows
// Jepsen's lazyfs (a FUSE filesystem that can "lose unfsynced writes"), but
// where lazyfs holds unsynced data in its own page cache, powerfs writes
// through to the real files at once and keeps, per file, what the write
// overwrote: the undo log of the file's durable content. A power cut (Cut)
// plays the undo logs back and rebuilds the namespace as the last directory
// fsyncs left it.
//
// The rules, per POSIX rather than per any one filesystem's kindness:
//
//   - A file's content and size are durable up to its last fsync or
//     fdatasync (both persist the size). A write, truncate or fallocate
//     since is undone by a cut.
//   - A name (a file created, linked, renamed or unlinked; a directory
//     made or removed) is durable once its directory is fsynced: a cut
//     gives back the entries the directory had at its last fsync. A rename
//     never made durable comes undone, an unlinked file whose removal was
//     never made durable comes back, a file created without a directory
//     fsync vanishes, even if its own data was fsynced.
//   - One step kinder than POSIX, as journalling filesystems (ext4, xfs)
//     are: fsyncing a directory also makes its own entry in its parent
//     durable, and its parent's, up to the root. Redis and etcd make a
//     directory, fill it, and fsync only it.
//   - Options.Journal goes all the way to a journalling filesystem: any
//     fsync makes every name change before it durable (the lab's nodes run
//     on ext4, and etcd needs it: see Options).
//   - Everything present when the filesystem is mounted is durable.
//   - Not modelled: mode, owner, times and extended attributes (kept as
//     they are at the cut), special files (kept only as they are),
//     sync_file_range (it does not reach FUSE and promises no durability),
//     syncfs, and torn writes (a write is all there or all gone).
//
// The real files live in a hidden sibling of the mount point, ".NAME.powerfs"
// (data/ is the tree, keep/ holds one hard link per file that has a durable
// name, so that an unlinked file can come back). Mount moves an existing
// directory's content there and Close moves it back, so outside a mount the
// directory is a plain directory. A process that dies while mounted leaves
// a dead mount ("transport endpoint is not connected") and the data in
// .NAME.powerfs/data: Sweep lazily unmounts such mounts, and the next Mount
// picks the data up again (as durable: the undo logs died with the process).
package powerfs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/redlocklab/redlocklab/internal/proc"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FSType is the filesystem type a powerfs mount shows in /proc/mounts.
const FSType = "fuse.powerfs"

// DevFuse is the device a mount needs.
const DevFuse = "/dev/fuse"

// ErrNoFUSE says the kernel's FUSE device is not there (a container without
// /dev/fuse, or the fuse module not loaded).
var ErrNoFUSE = errors.New("powerfs: " + DevFuse + " is missing: the power-loss filesystem needs FUSE (load the fuse module, or give the container /dev/fuse)")

// Available reports whether this process can mount a powerfs: it runs as
// root (the mount is made with mount(2), no fusermount) and /dev/fuse is
// there and can be opened.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("powerfs: mounting the power-loss filesystem needs root (it calls mount(2) itself; no fusermount)")
	}
	f, err := os.OpenFile(DevFuse, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return ErrNoFUSE
	}
	if err != nil {
		return fmt.Errorf("powerfs: open %s: %w", DevFuse, err)
	}
	return f.Close()
}

// Options tune a mount.
type Options struct {
	// AllowOther lets users other than the mounting one use the mount
	// (redis-server running as redis under a root supervisor); the kernel
	// then checks permissions as on any filesystem.
	AllowOther bool
	// Journal makes names durable as a journalling filesystem (ext4, xfs)
	// does: any fsync, of a file or a directory, also makes every name
	// change made before it durable (they share the journal's commit).
	// Without it the rules are POSIX's: only a directory's fsync makes its
	// names durable. etcd, for one, fsyncs a new WAL file and the parent of
	// the renamed WAL directory but never the WAL directory itself, and
	// relies on the journal for the file's name.
	Journal bool
}

// FS is one mounted powerfs. Its methods are safe for concurrent use.
type FS struct {
	dir   string // the mount point
	lower string // .NAME.powerfs
	opts  Options

	// life serialises Mount, Cut and Close.
	life   sync.Mutex
	server *fuse.Server
	closed bool

	// mu guards st and orders every write-like operation against the
	// fsyncs that make it durable.
	mu sync.Mutex
	st *state
}

// Mount mounts a powerfs at dir (made if missing). What dir holds becomes
// the lower tree, durable as it is. A lower tree left by an earlier mount
// is picked up; dir must then be empty.
func Mount(dir string, opts Options) (*FS, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("powerfs: %w", err)
	}
	if err := Available(); err != nil {
		return nil, err
	}
	f := &FS{dir: dir, lower: lowerOf(dir), opts: opts}
	if err := f.adopt(); err != nil {
		return nil, err
	}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

// lowerOf is where the real files of a mount at dir live.
func lowerOf(dir string) string {
	return filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".powerfs")
}

func (f *FS) data() string { return filepath.Join(f.lower, "data") }
func (f *FS) keep() string { return filepath.Join(f.lower, "keep") }

// Dir returns the mount point.
func (f *FS) Dir() string { return f.dir }

// adopt makes the lower tree: dir's content moved into it, or one left by
// an earlier mount.
func (f *FS) adopt() error {
	if err := os.MkdirAll(f.lower, 0o700); err != nil {
		return fmt.Errorf("powerfs: %w", err)
	}
	_, err := os.Lstat(f.data())
	switch {
	case err == nil:
		if err := os.MkdirAll(f.dir, 0o755); err != nil {
			return fmt.Errorf("powerfs: %w", err)
		}
		ents, err := os.ReadDir(f.dir)
		if err != nil {
			return fmt.Errorf("powerfs: %w", err)
		}
		if len(ents) > 0 {
			return fmt.Errorf("powerfs: %s holds files and %s holds an earlier mount's: move one away", f.dir, f.data())
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("powerfs: %w", err)
	}
	fi, err := os.Lstat(f.dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(f.data(), 0o755); err != nil {
			return fmt.Errorf("powerfs: %w", err)
		}
		return os.MkdirAll(f.dir, 0o755)
	case err != nil:
		return fmt.Errorf("powerfs: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("powerfs: %s is not a directory", f.dir)
	}
	if err := os.Rename(f.dir, f.data()); err != nil {
		return fmt.Errorf("powerfs: move %s under %s: %w", f.dir, f.lower, err)
	}
	if err := os.Mkdir(f.dir, fi.Mode().Perm()); err != nil {
		return fmt.Errorf("powerfs: %w", err)
	}
	return nil
}

// mount scans the lower tree (all of it durable) and serves it at dir.
func (f *FS) mount() error {
	st, err := scan(f.data(), f.keep())
	if err != nil {
		return err
	}
	var rst syscall.Stat_t
	if err := syscall.Stat(f.data(), &rst); err != nil {
		return fmt.Errorf("powerfs: %w", err)
	}
	root := &fs.LoopbackRoot{Path: f.data(), Dev: uint64(rst.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, pfs: f}
	}
	root.RootNode = root.NewNode(root, nil, "", &rst)
	mo := fuse.MountOptions{
		DirectMountStrict: true, // mount(2) itself: no fusermount (none is installed), no fallback to it
		FsName:            "powerfs",
		Name:              "powerfs",
		AllowOther:        f.opts.AllowOther,
		// The kernel checks permissions itself instead of asking this
		// process (FUSE_ACCESS on every chdir and exec lookup).
		Options: []string{"default_permissions"},
	}
	st.journal = f.opts.Journal
	f.mu.Lock()
	f.st = st
	f.mu.Unlock()
	// go-fuse opens /dev/fuse without close-on-exec: a server started
	// later (redis-server, etcd) would inherit it and keep the connection
	// alive after this process died, so that the dead mount hangs instead
	// of failing. The fork lock keeps an exec from catching the descriptor
	// before it is marked.
	syscall.ForkLock.RLock()
	// Every change goes through the mount, and a cut remounts it, so the
	// kernel may keep names and attributes for a second (go-fuse's default
	// without options) instead of asking for them on every access.
	ttl := time.Second
	srv, err := fs.Mount(f.dir, root.RootNode, &fs.Options{MountOptions: mo, EntryTimeout: &ttl, AttrTimeout: &ttl})
	if err == nil {
		err = closeFUSEOnExec()
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		if srv != nil {
			srv.Unmount()
		}
		return fmt.Errorf("powerfs: mount %s: %w", f.dir, err)
	}
	f.server = srv
	pid := []byte(fmt.Sprintf("%d\n", os.Getpid()))
	if err := os.WriteFile(filepath.Join(f.lower, pidFile), pid, 0o600); err != nil {
		return fmt.Errorf("powerfs: %w", err)
	}
	return nil
}

// closeFUSEOnExec marks every /dev/fuse descriptor of this process
// close-on-exec.
func closeFUSEOnExec() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || target != DevFuse {
			continue
		}
		var fd int
		if _, err := fmt.Sscanf(e.Name(), "%d", &fd); err != nil {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return err
		}
	}
	return nil
}

// copyGrace is how long unmount waits, once the mount point is unmounted,
// for the FUSE connection to end by itself before it ends it (see unmount).
const copyGrace = time.Second

// unmount ends the FUSE server. The writers must be gone: a file still
// open keeps the mount busy, which is retried for a while and then
// reported.
//
// A mount namespace made while the filesystem was mounted (a lab machine's
// systemd-nspawn, a service's private namespace, any `unshare -m`) holds a
// copy of the mount, and on a host whose mounts do not propagate (private,
// the default without systemd) the unmount here does not reach it: the
// connection would stay up, and the server wait for it, for as long as
// that namespace lives. Nothing uses such a copy (it is another node's
// disk), so once the mount point here is unmounted the connection is
// aborted; the copies then fail with "transport endpoint is not
// connected".
func (f *FS) unmount(ctx context.Context) error {
	if f.server == nil {
		return nil
	}
	dev := f.device()
	var err error
	for {
		done := make(chan error, 1)
		srv := f.server
		go func() { done <- srv.Unmount() }() // ends once the connection does, which the abort below makes sure of
		select {
		case err = <-done:
		case <-time.After(copyGrace):
			// Unmount's retries of a busy mount take a fraction of this:
			// it unmounted and waits for the connection.
			abortConn(dev)
			err = <-done
		}
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			// Never leave a mount behind: end it by force. What still had
			// it open gets errors.
			if mps, merr := mounts(); merr == nil {
				for _, m := range mps {
					if m.dir == f.dir {
						abortConn(m.dev)
					}
				}
			}
			_ = unix.Unmount(f.dir, unix.MNT_DETACH)
			f.server.Wait()
			f.server = nil
			return fmt.Errorf("powerfs: unmount %s: %w; ended by force (%w)", f.dir, err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	f.server.Wait()
	f.server = nil
	return nil
}

// device is the mount's MAJ:MIN in mountinfo, "" when it is not there.
func (f *FS) device() string {
	mps, err := mounts()
	if err != nil {
		return ""
	}
	for _, m := range mps {
		if m.dir == f.dir {
			return m.dev
		}
	}
	return ""
}

// CutResult says what a power cut took.
type CutResult struct {
	// Truncated is the bytes cut off the ends of files (written or
	// extended since their last fsync); Restored the bytes written back
	// where unsynced writes had overwritten durable content.
	Truncated, Restored int64
	// Files names the files whose content was cut back.
	Files []string
	// Vanished names what is gone (created or renamed to, never made
	// durable); Returned what is back (unlinked or renamed away, never
	// made durable). Paths are relative to the mount point.
	Vanished, Returned []string
}

// Cut is a power cut: every file goes back to its durable content and the
// namespace to its durable state, then the directory is mounted afresh
// (everything in it durable). The caller stops the writers first: a file
// still open keeps the mount busy and Cut waits for it until ctx ends.
func (f *FS) Cut(ctx context.Context) (CutResult, error) {
	f.life.Lock()
	defer f.life.Unlock()
	if f.closed {
		return CutResult{}, errors.New("powerfs: cut after close")
	}
	if err := f.unmount(ctx); err != nil {
		return CutResult{}, err
	}
	f.mu.Lock()
	st := f.st
	f.st = nil
	f.mu.Unlock()
	res, err := st.restore(f.lower)
	if err != nil {
		return res, err
	}
	return res, f.mount()
}

// Close unmounts and moves the lower tree back into the directory, as it
// is (a clean shutdown: nothing is lost). Idempotent.
func (f *FS) Close(ctx context.Context) error {
	f.life.Lock()
	defer f.life.Unlock()
	if f.closed {
		return nil
	}
	if err := f.unmount(ctx); err != nil {
		return err
	}
	f.closed = true
	f.mu.Lock()
	f.st = nil
	f.mu.Unlock()
	return giveBack(f.dir, f.lower)
}

// giveBack moves the lower tree at lower back to the (unmounted, empty)
// mount point dir.
func giveBack(dir, lower string) error {
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("powerfs: %w", err)
	}
	if err := os.Rename(filepath.Join(lower, "data"), dir); err != nil {
		return fmt.Errorf("powerfs: give %s back: %w", dir, err)
	}
	if err := os.RemoveAll(lower); err != nil {
		return fmt.Errorf("powerfs: %w", err)
	}
	return nil
}

// Sweep ends every powerfs mount at or under root whose process died (the
// one named in .NAME.powerfs/pid): its FUSE connection aborted, a lazy unmount
// (MNT_DETACH, so a stale mount never blocks), then the lower tree goes
// back into the directory. A live mount is left to its process. It
// returns the mount points it ended.
func Sweep(root string) ([]string, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("powerfs: %w", err)
	}
	mps, err := mounts()
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, m := range mps {
		mp := m.dir
		if mp != root && !strings.HasPrefix(mp, root+string(filepath.Separator)) {
			continue
		}
		if serverAlive(mp) {
			continue // served: not ours to end
		}
		// A child the dead server forked may still hold the FUSE device
		// (inherited before its exec), which keeps the connection up with
		// nobody answering: abort it, or the unmount and everyone who
		// touches the directory would wait for ever.
		abortConn(m.dev)
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("powerfs: unmount %s: %w", mp, err))
			continue
		}
		done = append(done, mp)
		if _, err := os.Stat(filepath.Join(lowerOf(mp), "data")); err == nil {
			if err := giveBack(mp, lowerOf(mp)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return done, errors.Join(errs...)
}

const pidFile = "pid"

// serverAlive reports whether the process that mounted mp is alive.
func serverAlive(mp string) bool {
	b, err := os.ReadFile(filepath.Join(lowerOf(mp), pidFile))
	if err != nil {
		return false
	}
	var pid int
	if _, err := fmt.Sscanf(string(b), "%d", &pid); err != nil || pid <= 0 {
		return false
	}
	return proc.Alive(pid) // a zombie serves nothing
}

// connections is where the kernel's fusectl filesystem lets a FUSE
// connection be aborted; systemd mounts it, and abortConn does when it is
// not.
const connections = "/sys/fs/fuse/connections"

// abortConn aborts the FUSE connection of the mount whose device is dev
// ("0:40" in mountinfo: the connection is its minor number).
func abortConn(dev string) {
	_, minor, ok := strings.Cut(dev, ":")
	if !ok {
		return
	}
	conn := filepath.Join(connections, minor)
	if _, err := os.Stat(conn); err != nil {
		_ = unix.Mount("fusectl", connections, "fusectl", 0, "")
	}
	_ = os.WriteFile(filepath.Join(conn, "abort"), []byte("1"), 0)
}

// mount is one powerfs mount in mountinfo.
type mount struct {
	dir string
	dev string // MAJ:MIN
}

// mounts lists the powerfs filesystems mounted.
func mounts() ([]mount, error) {
	fh, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("powerfs: %w", err)
	}
	defer fh.Close()
	var out []mount
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) || fields[sep+1] != FSType {
			continue
		}
		out = append(out, mount{dir: unescapeMount(fields[4]), dev: fields[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("powerfs: %w", err)
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

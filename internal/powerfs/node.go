package powerfs

import (
	"context"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is go-fuse's loopback node with every operation that changes
// content or names told to the state first. The rest passes straight
// through.
type node struct {
	fs.LoopbackNode
	pfs *FS
}

var (
	_ fs.NodeOpener          = (*node)(nil)
	_ fs.NodeCreater         = (*node)(nil)
	_ fs.NodeSetattrer       = (*node)(nil)
	_ fs.NodeUnlinker        = (*node)(nil)
	_ fs.NodeRmdirer         = (*node)(nil)
	_ fs.NodeRenamer         = (*node)(nil)
	_ fs.NodeCopyFileRanger  = (*node)(nil)
	_ fs.NodeOpendirHandler  = (*node)(nil)
	_ fs.FileWriter          = (*file)(nil)
	_ fs.FileWritever        = (*file)(nil)
	_ fs.FileFsyncer         = (*file)(nil)
	_ fs.FileAllocater       = (*file)(nil)
	_ fs.FileFsyncdirer      = (*dir)(nil)
	_ fs.FileReaddirenter    = (*dir)(nil)
	_ fs.FilePassthroughFder = (*fs.LoopbackFile)(nil) // which file must not be: see file
)

// rel is the node's path relative to the lower root.
func (n *node) rel() string {
	return n.Path(n.RootData.RootNode.EmbeddedInode())
}

func (n *node) lower() string { return filepath.Join(n.RootData.Path, n.rel()) }

// locked runs fn under the state lock; with the state gone (a cut or close
// in progress) the operation fails with EIO.
func (n *node) locked(fn func(s *state) syscall.Errno) syscall.Errno {
	n.pfs.mu.Lock()
	defer n.pfs.mu.Unlock()
	if n.pfs.st == nil {
		return syscall.EIO
	}
	return fn(n.pfs.st)
}

// preservePath is preserve for a file known by its lower path.
func preservePath(s *state, p string, off, end int64) syscall.Errno {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err == syscall.ENOENT {
		return 0
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0
	}
	return fs.ToErrno(s.preserve(fd, st.Ino, off, end))
}

// readable makes a write-only open read-write: a write must read what it
// overwrites. The kernel has checked the caller's permission already, and
// the caller's descriptor stays write-only.
func readable(flags uint32) uint32 {
	if flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		return flags&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return flags
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	flags = readable(flags)
	var (
		fh    fs.FileHandle
		ff    uint32
		errno syscall.Errno
	)
	if flags&syscall.O_TRUNC != 0 {
		errno = n.locked(func(s *state) syscall.Errno {
			if e := preservePath(s, n.lower(), 0, -1); e != 0 {
				return e
			}
			fh, ff, errno = n.LoopbackNode.Open(ctx, flags)
			return errno
		})
	} else {
		fh, ff, errno = n.LoopbackNode.Open(ctx, flags)
	}
	if errno != 0 {
		return nil, 0, errno
	}
	h, errno := n.pfs.wrap(fh)
	return h, ff, errno
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	flags = readable(flags)
	var (
		ch    *fs.Inode
		fh    fs.FileHandle
		ff    uint32
		errno syscall.Errno
	)
	errno = n.locked(func(s *state) syscall.Errno {
		if flags&syscall.O_TRUNC != 0 {
			if e := preservePath(s, filepath.Join(n.lower(), name), 0, -1); e != 0 {
				return e
			}
		}
		ch, fh, ff, errno = n.LoopbackNode.Create(ctx, name, flags, mode, out)
		s.named()
		return errno
	})
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h, errno := n.pfs.wrap(fh)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, h, ff, 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var inner fs.FileHandle
	h, _ := f.(*file)
	if h != nil {
		inner = h.lf
	} else if f != nil {
		inner = f
	}
	sz, ok := in.GetSize()
	if !ok {
		return n.LoopbackNode.Setattr(ctx, inner, in, out)
	}
	return n.locked(func(s *state) syscall.Errno {
		var e syscall.Errno
		if h != nil {
			e = fs.ToErrno(s.preserve(h.fd, h.ino, int64(sz), -1))
		} else {
			e = preservePath(s, n.lower(), int64(sz), -1)
		}
		if e != 0 {
			return e
		}
		return n.LoopbackNode.Setattr(ctx, inner, in, out)
	})
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	p := filepath.Join(n.lower(), name)
	return n.locked(func(s *state) syscall.Errno {
		var st syscall.Stat_t
		lerr := syscall.Lstat(p, &st)
		if e := n.LoopbackNode.Unlink(ctx, name); e != 0 {
			return e
		}
		s.named()
		if lerr == nil && st.Nlink <= 1 {
			s.forgetFile(st.Ino)
		}
		return 0
	})
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	p := filepath.Join(n.lower(), name)
	return n.locked(func(s *state) syscall.Errno {
		var st syscall.Stat_t
		lerr := syscall.Lstat(p, &st)
		if e := n.LoopbackNode.Rmdir(ctx, name); e != 0 {
			return e
		}
		s.named()
		if lerr == nil {
			s.forgetDir(st.Ino)
		}
		return 0
	})
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	target := filepath.Join(np.lower(), newName)
	return n.locked(func(s *state) syscall.Errno {
		var st syscall.Stat_t
		lerr := syscall.Lstat(target, &st)
		if e := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags); e != 0 {
			return e
		}
		s.named()
		if lerr != nil || flags&unix.RENAME_EXCHANGE != 0 {
			return 0
		}
		// The rename replaced the target: as an unlink or rmdir of it.
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			s.forgetDir(st.Ino)
		case syscall.S_IFREG:
			if st.Nlink <= 1 {
				s.forgetFile(st.Ino)
			}
		}
		return 0
	})
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var ch *fs.Inode
	errno := n.locked(func(s *state) syscall.Errno {
		var e syscall.Errno
		ch, e = n.LoopbackNode.Mkdir(ctx, name, mode, out)
		s.named()
		return e
	})
	return ch, errno
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var ch *fs.Inode
	errno := n.locked(func(s *state) syscall.Errno {
		var e syscall.Errno
		ch, e = n.LoopbackNode.Link(ctx, target, name, out)
		s.named()
		return e
	})
	return ch, errno
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var ch *fs.Inode
	errno := n.locked(func(s *state) syscall.Errno {
		var e syscall.Errno
		ch, e = n.LoopbackNode.Symlink(ctx, target, name, out)
		s.named()
		return e
	})
	return ch, errno
}

func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	in, ok1 := fhIn.(*file)
	o, ok2 := fhOut.(*file)
	if !ok1 || !ok2 {
		return 0, syscall.ENOTSUP
	}
	var count uint32
	errno := n.locked(func(s *state) syscall.Errno {
		if err := s.preserve(o.fd, o.ino, int64(offOut), int64(offOut+length)); err != nil {
			return fs.ToErrno(err)
		}
		var e syscall.Errno
		count, e = n.LoopbackNode.CopyFileRange(ctx, in.lf, offIn, out, o.lf, offOut, length, flags)
		return e
	})
	return count, errno
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, ff, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dir{inner: fh, n: n}, ff, 0
}

// wrap puts a loopback file handle inside a file.
func (f *FS) wrap(fh fs.FileHandle) (*file, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return nil, syscall.EIO
	}
	fd, ok := lf.PassthroughFd()
	if !ok {
		return nil, syscall.EBADF
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		lf.Release(context.Background())
		return nil, fs.ToErrno(err)
	}
	return &file{lf: lf, fd: fd, ino: st.Ino, pfs: f}, 0
}

// file is an open file. It delegates to go-fuse's loopback file but does
// not embed it: the loopback file offers its descriptor for kernel
// passthrough (FilePassthroughFder), and a passthrough file's writes would
// never reach us.
type file struct {
	lf  *fs.LoopbackFile
	fd  int // lf's descriptor, for reading what a write will overwrite
	ino uint64
	pfs *FS
}

func (h *file) locked(fn func(s *state) syscall.Errno) syscall.Errno {
	h.pfs.mu.Lock()
	defer h.pfs.mu.Unlock()
	if h.pfs.st == nil {
		return syscall.EIO
	}
	return fn(h.pfs.st)
}

func (h *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	var n uint32
	errno := h.locked(func(s *state) syscall.Errno {
		if err := s.preserve(h.fd, h.ino, off, off+int64(len(data))); err != nil {
			return fs.ToErrno(err)
		}
		var e syscall.Errno
		n, e = h.lf.Write(ctx, data, off)
		return e
	})
	return n, errno
}

func (h *file) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	size := 0
	for _, d := range data {
		size += len(d)
	}
	var n uint32
	errno := h.locked(func(s *state) syscall.Errno {
		if err := s.preserve(h.fd, h.ino, off, off+int64(size)); err != nil {
			return fs.ToErrno(err)
		}
		var e syscall.Errno
		n, e = h.lf.Writev(ctx, data, off)
		return e
	})
	return n, errno
}

// Fsync covers fsync and fdatasync alike: both make the size durable.
func (h *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if e := h.locked(func(s *state) syscall.Errno { return fs.ToErrno(s.synced(h.ino)) }); e != 0 {
		return e
	}
	return h.lf.Fsync(ctx, flags)
}

func (h *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return h.locked(func(s *state) syscall.Errno {
		from, to := int64(off), int64(off) // plain or KEEP_SIZE: content unchanged, only the size
		if mode&^unix.FALLOC_FL_KEEP_SIZE != 0 {
			from, to = int64(off), -1 // punch, zero, collapse, insert: from off on
		}
		if err := s.preserve(h.fd, h.ino, from, to); err != nil {
			return fs.ToErrno(err)
		}
		return h.lf.Allocate(ctx, off, size, mode)
	})
}

func (h *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.lf.Read(ctx, buf, off)
}
func (h *file) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }
func (h *file) Flush(ctx context.Context) syscall.Errno   { return h.lf.Flush(ctx) }
func (h *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}
func (h *file) Statx(ctx context.Context, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return h.lf.Statx(ctx, flags, mask, out)
}
func (h *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}
func (h *file) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return h.lf.Getlk(ctx, owner, lk, flags, out)
}
func (h *file) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlk(ctx, owner, lk, flags)
}
func (h *file) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlkw(ctx, owner, lk, flags)
}

// dir is an open directory; its fsync makes its entries durable.
type dir struct {
	inner fs.FileHandle
	n     *node
}

func (d *dir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	if e := d.n.locked(func(s *state) syscall.Errno { return fs.ToErrno(s.syncDir(d.n.rel())) }); e != 0 {
		return e
	}
	if fd, ok := d.inner.(fs.FileFsyncdirer); ok {
		return fd.Fsyncdir(ctx, flags)
	}
	return 0
}

func (d *dir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if r, ok := d.inner.(fs.FileReaddirenter); ok {
		return r.Readdirent(ctx)
	}
	return nil, syscall.ENOTSUP
}

func (d *dir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if r, ok := d.inner.(fs.FileSeekdirer); ok {
		return r.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (d *dir) Releasedir(ctx context.Context, flags uint32) {
	if r, ok := d.inner.(fs.FileReleasedirer); ok {
		r.Releasedir(ctx, flags)
	}
}

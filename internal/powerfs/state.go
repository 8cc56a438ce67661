package powerfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"syscall"
)

// state is what a disk would keep: per directory the entries it had at its
// last fsync, per file written since its last fsync the durable size and
// the durable bytes its writes overwrote. Files and directories are known
// by their lower inode numbers. Every method runs under FS.mu.
type state struct {
	data, keep string
	root       uint64 // the lower root directory's inode

	dirs  map[uint64]*dirState
	files map[uint64]*fileState
	// kept is the files with a hard link in keep/, named keep/INO: every
	// file some durable directory names, so that it can come back.
	kept map[uint64]bool
	// ghost numbers removed directories: their durable entries stay, under
	// a key no live inode can take.
	ghost uint64
	// journal: any fsync makes every name change before it durable
	// (Options.Journal); renamed says one happened since the last.
	journal, renamed bool
}

// named notes a change of names (create, link, rename, unlink, mkdir,
// rmdir).
func (s *state) named() { s.renamed = true }

// commit is the journal commit an fsync forces: with Options.Journal
// every directory's current entries become durable.
func (s *state) commit() error {
	if !s.journal || !s.renamed {
		return nil
	}
	err := filepath.WalkDir(s.data, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		_, err = s.snapshotDir(p)
		return err
	})
	if err != nil {
		return fmt.Errorf("powerfs: commit: %w", err)
	}
	s.renamed = false
	return s.dropUnnamed()
}

type kind uint8

const (
	kindFile kind = iota + 1
	kindDir
	kindSymlink
)

type entry struct {
	kind   kind
	ino    uint64 // file or directory
	target string // symlink
}

type dirState struct {
	mode     os.FileMode
	uid, gid int
	entries  map[string]entry
}

type fileState struct {
	durable int64  // the size at the last fsync
	saved   []span // sorted, disjoint, inside [0, durable)
}

// span is durable content that an unsynced write overwrote.
type span struct {
	off  int64
	data []byte
}

func (s span) end() int64 { return s.off + int64(len(s.data)) }

// scan makes the state of a freshly mounted tree: all of it durable.
func scan(data, keep string) (*state, error) {
	if err := os.RemoveAll(keep); err != nil {
		return nil, fmt.Errorf("powerfs: %w", err)
	}
	if err := os.Mkdir(keep, 0o700); err != nil {
		return nil, fmt.Errorf("powerfs: %w", err)
	}
	var rst syscall.Stat_t
	if err := syscall.Lstat(data, &rst); err != nil {
		return nil, fmt.Errorf("powerfs: %w", err)
	}
	s := &state{
		data: data, keep: keep, root: rst.Ino,
		dirs: map[uint64]*dirState{}, files: map[uint64]*fileState{}, kept: map[uint64]bool{},
		ghost: 1 << 63,
	}
	err := filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		_, err = s.snapshotDir(p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("powerfs: scan %s: %w", data, err)
	}
	return s, nil
}

// snapshotDir makes the directory at p's current entries its durable ones
// and returns its inode.
func (s *state) snapshotDir(p string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return 0, err
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return 0, err
	}
	ds := dirOf(&st)
	for _, e := range ents {
		cp := filepath.Join(p, e.Name())
		var cst syscall.Stat_t
		if err := syscall.Lstat(cp, &cst); err != nil {
			continue // gone meanwhile
		}
		switch cst.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			if err := s.keepLink(cp, cst.Ino); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue
				}
				return 0, err
			}
			ds.entries[e.Name()] = entry{kind: kindFile, ino: cst.Ino}
		case syscall.S_IFDIR:
			if s.dirs[cst.Ino] == nil {
				s.dirs[cst.Ino] = dirOf(&cst) // durable, but empty until it is fsynced
			}
			ds.entries[e.Name()] = entry{kind: kindDir, ino: cst.Ino}
		case syscall.S_IFLNK:
			target, err := os.Readlink(cp)
			if err != nil {
				continue
			}
			ds.entries[e.Name()] = entry{kind: kindSymlink, target: target}
		}
	}
	s.dirs[st.Ino] = ds
	return st.Ino, nil
}

func dirOf(st *syscall.Stat_t) *dirState {
	return &dirState{mode: os.FileMode(st.Mode & 0o7777), uid: int(st.Uid), gid: int(st.Gid), entries: map[string]entry{}}
}

// keepLink gives the file at p, inode ino, its link in keep/.
func (s *state) keepLink(p string, ino uint64) error {
	if s.kept[ino] {
		return nil
	}
	if err := os.Link(p, s.keepPath(ino)); err != nil {
		return err
	}
	s.kept[ino] = true
	return nil
}

func (s *state) keepPath(ino uint64) string {
	return filepath.Join(s.keep, strconv.FormatUint(ino, 10))
}

// syncDir is an fsync of the directory rel (relative to the lower root):
// its entries become durable, and so does its own entry in each ancestor.
func (s *state) syncDir(rel string) error {
	if err := s.commit(); err != nil {
		return err
	}
	ino, err := s.snapshotDir(filepath.Join(s.data, rel))
	if err != nil {
		return fmt.Errorf("powerfs: fsync %s: %w", rel, err)
	}
	for rel != "." && rel != "" && rel != "/" {
		parent := filepath.Dir(rel)
		var pst syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(s.data, parent), &pst); err != nil {
			return fmt.Errorf("powerfs: fsync %s: %w", rel, err)
		}
		pd := s.dirs[pst.Ino]
		if pd == nil {
			pd = dirOf(&pst)
			s.dirs[pst.Ino] = pd
		}
		pd.entries[filepath.Base(rel)] = entry{kind: kindDir, ino: ino}
		ino, rel = pst.Ino, parent
	}
	return s.dropUnnamed()
}

// dropUnnamed removes the keep/ links of files no durable directory
// names any more (an AOF rewrite's old files, a WAL's removed segments),
// so that they do not pile up.
func (s *state) dropUnnamed() error {
	named := map[uint64]bool{}
	seen := map[uint64]bool{}
	var walk func(uint64)
	walk = func(d uint64) {
		if seen[d] {
			return
		}
		seen[d] = true
		ds := s.dirs[d]
		if ds == nil {
			return
		}
		for _, e := range ds.entries {
			switch e.kind {
			case kindFile:
				named[e.ino] = true
			case kindDir:
				walk(e.ino)
			}
		}
	}
	walk(s.root)
	for ino := range s.kept {
		if named[ino] {
			continue
		}
		p := s.keepPath(ino)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err == nil && st.Nlink <= 1 {
			delete(s.files, ino) // the last link: the inode number is free again
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("powerfs: %w", err)
		}
		delete(s.kept, ino)
	}
	return nil
}

// forgetDir is called once the directory ino was removed: its durable
// entries move to a ghost key, so that a new directory that takes the
// inode number does not inherit them.
func (s *state) forgetDir(ino uint64) {
	ds := s.dirs[ino]
	if ds == nil || ino == s.root {
		return
	}
	s.ghost++
	g := s.ghost
	s.dirs[g] = ds
	delete(s.dirs, ino)
	for _, d := range s.dirs {
		for name, e := range d.entries {
			if e.kind == kindDir && e.ino == ino {
				d.entries[name] = entry{kind: kindDir, ino: g}
			}
		}
	}
}

// forgetFile is called once the last link of the file ino was removed and
// no durable directory names it: its inode number is free again.
func (s *state) forgetFile(ino uint64) {
	if !s.kept[ino] {
		delete(s.files, ino)
	}
}

// preserve is called before a write-like operation changes [off, end) of
// the file open at fd (end < 0: up to its durable size): it saves the
// durable bytes there that are not saved yet. The first call after an
// fsync also records the durable size.
func (s *state) preserve(fd int, ino uint64, off, end int64) error {
	f := s.files[ino]
	if f == nil {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return err
		}
		f = &fileState{durable: st.Size}
		s.files[ino] = f
	}
	if end < 0 || end > f.durable {
		end = f.durable
	}
	if off < 0 {
		off = 0
	}
	if off >= end {
		return nil
	}
	var gaps [][2]int64
	cur := off
	for _, sp := range f.saved {
		if sp.end() <= cur {
			continue
		}
		if sp.off >= end {
			break
		}
		if sp.off > cur {
			gaps = append(gaps, [2]int64{cur, sp.off})
		}
		cur = max(cur, sp.end())
	}
	if cur < end {
		gaps = append(gaps, [2]int64{cur, end})
	}
	for _, g := range gaps {
		buf := make([]byte, g[1]-g[0])
		n, err := preadFull(fd, buf, g[0])
		if err != nil {
			return err
		}
		// Shorter than the durable size only if the file was cut behind
		// our back; what is not there cannot be saved.
		if n > 0 {
			f.saved = append(f.saved, span{off: g[0], data: buf[:n]})
		}
	}
	sort.Slice(f.saved, func(i, j int) bool { return f.saved[i].off < f.saved[j].off })
	return nil
}

func preadFull(fd int, buf []byte, off int64) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := syscall.Pread(fd, buf[n:], off+int64(n))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

// synced is an fsync of the file ino: all of it is durable now (and with
// Options.Journal every name too).
func (s *state) synced(ino uint64) error {
	delete(s.files, ino)
	return s.commit()
}

// restore is the power cut on the unmounted lower tree: it rebuilds the
// durable namespace from keep/ into a new tree, plays back the undo logs,
// and puts the new tree in place of the old.
func (s *state) restore(lower string) (CutResult, error) {
	var res CutResult
	live, err := listTree(s.data)
	if err != nil {
		return res, err
	}
	fresh := filepath.Join(lower, "cut")
	if err := os.RemoveAll(fresh); err != nil {
		return res, fmt.Errorf("powerfs: %w", err)
	}
	durable := map[string]entry{}
	paths := map[uint64]string{} // a durable path of each kept file
	built := map[uint64]bool{}
	var build func(ino uint64, p, rel string) error
	build = func(ino uint64, p, rel string) error {
		built[ino] = true
		ds := s.dirs[ino]
		if ds == nil {
			ds = &dirState{mode: 0o755, uid: -1, gid: -1}
		}
		if err := os.Mkdir(p, ds.mode.Perm()); err != nil {
			return err
		}
		if err := os.Chmod(p, ds.mode); err != nil {
			return err
		}
		if err := os.Lchown(p, ds.uid, ds.gid); err != nil {
			return err
		}
		names := make([]string, 0, len(ds.entries))
		for name := range ds.entries {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			e := ds.entries[name]
			cp, crel := filepath.Join(p, name), filepath.Join(rel, name)
			switch e.kind {
			case kindFile:
				if !s.kept[e.ino] {
					continue
				}
				if err := os.Link(s.keepPath(e.ino), cp); err != nil {
					return err
				}
				if _, ok := paths[e.ino]; !ok {
					paths[e.ino] = crel
				}
			case kindDir:
				if built[e.ino] {
					continue // renamed into another durable directory too: one place only
				}
				if err := build(e.ino, cp, crel); err != nil {
					return err
				}
			case kindSymlink:
				if err := os.Symlink(e.target, cp); err != nil {
					return err
				}
			}
			durable[crel] = e
		}
		return nil
	}
	if err := build(s.root, fresh, ""); err != nil {
		return res, fmt.Errorf("powerfs: cut: rebuild: %w", err)
	}
	inos := make([]uint64, 0, len(s.files))
	for ino := range s.files {
		inos = append(inos, ino)
	}
	slices.Sort(inos)
	for _, ino := range inos {
		p, ok := paths[ino]
		if !ok {
			continue // no durable name: gone anyway
		}
		cut, back, err := undo(s.keepPath(ino), s.files[ino])
		if err != nil {
			return res, fmt.Errorf("powerfs: cut %s: %w", p, err)
		}
		if cut+back > 0 {
			res.Truncated += cut
			res.Restored += back
			res.Files = append(res.Files, p)
		}
	}
	for p, e := range live {
		if d, ok := durable[p]; !ok || !sameEntry(d, e) {
			res.Vanished = append(res.Vanished, p)
		}
	}
	for p, e := range durable {
		if l, ok := live[p]; !ok || !sameEntry(l, e) {
			res.Returned = append(res.Returned, p)
		}
	}
	slices.Sort(res.Files)
	slices.Sort(res.Vanished)
	slices.Sort(res.Returned)
	old := filepath.Join(lower, "old")
	if err := os.RemoveAll(old); err != nil {
		return res, fmt.Errorf("powerfs: %w", err)
	}
	if err := os.Rename(s.data, old); err != nil {
		return res, fmt.Errorf("powerfs: %w", err)
	}
	if err := os.Rename(fresh, s.data); err != nil {
		return res, fmt.Errorf("powerfs: %w", err)
	}
	if err := os.RemoveAll(old); err != nil {
		return res, fmt.Errorf("powerfs: %w", err)
	}
	if err := os.RemoveAll(s.keep); err != nil {
		return res, fmt.Errorf("powerfs: %w", err)
	}
	return res, nil
}

func sameEntry(a, b entry) bool {
	if a.kind != b.kind {
		return false
	}
	if a.kind == kindSymlink {
		return a.target == b.target
	}
	// A directory's inode is not compared: a removed one comes back as a
	// ghost, and under its name it is the same directory.
	return a.kind == kindDir || a.ino == b.ino
}

// undo puts the file at p back to its durable content and returns the
// bytes cut off its end and the bytes written back inside.
func undo(p string, f *fileState) (cut, back int64, err error) {
	fh, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return 0, 0, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return 0, 0, err
	}
	if fi.Size() > f.durable {
		cut = fi.Size() - f.durable
	}
	if fi.Size() != f.durable {
		if err := fh.Truncate(f.durable); err != nil {
			return 0, 0, err
		}
	}
	for _, sp := range f.saved {
		if _, err := fh.WriteAt(sp.data, sp.off); err != nil {
			return 0, 0, err
		}
		back += int64(len(sp.data))
	}
	return cut, back, nil
}

// listTree lists every path under root (relative) with what it is.
func listTree(root string) (map[string]entry, error) {
	out := map[string]entry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			out[rel] = entry{kind: kindFile, ino: st.Ino}
		case syscall.S_IFDIR:
			out[rel] = entry{kind: kindDir, ino: st.Ino}
		case syscall.S_IFLNK:
			t, _ := os.Readlink(p)
			out[rel] = entry{kind: kindSymlink, target: t}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("powerfs: %w", err)
	}
	return out, nil
}

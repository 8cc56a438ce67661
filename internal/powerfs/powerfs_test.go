package powerfs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redlocklab/redlocklab/internal/testenv"
)

// The tests re-run this binary as a helper: POWERFS_HELPER names what it
// does, so that the writes come from another process through the kernel.
func TestMain(m *testing.M) {
	switch os.Getenv("POWERFS_HELPER") {
	case "":
		os.Exit(m.Run())
	case "writer":
		if err := writer(os.Getenv("POWERFS_DIR")); err != nil {
			fmt.Fprintln(os.Stderr, "writer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case "mounter":
		f, err := Mount(os.Getenv("POWERFS_DIR"), Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "mounter:", err)
			os.Exit(1)
		}
		fmt.Println("mounted", f.Dir())
		time.Sleep(time.Hour) // until the test kills it
		os.Exit(1)
	}
}

func requireFUSE(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		testenv.Missing(t, err.Error())
	}
}

// writer does, in order, everything whose durability the cut must judge.
func writer(dir string) error {
	p := func(name string) string { return filepath.Join(dir, name) }
	write := func(name, s string, sync bool) error {
		f, err := os.OpenFile(p(name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.WriteString(s); err != nil {
			return err
		}
		if sync {
			if err := f.Sync(); err != nil {
				return err
			}
		}
		return f.Close()
	}
	syncDir := func(name string) error {
		f, err := os.Open(p(name))
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	}
	steps := []func() error{
		// a.log: "hello " fsynced and named durably; "world" never fsynced.
		func() error { return write("a.log", "hello ", true) },
		func() error { return syncDir(".") },
		func() error { return write("a.log", "world", false) },
		// b: written, fsynced, renamed, the rename made durable.
		func() error { return write("b.tmp", "B", true) },
		func() error { return os.Rename(p("b.tmp"), p("b.final")) },
		func() error { return syncDir(".") },
		// c: the same, but the rename is never made durable (and the
		// name c.tmp never was): neither name survives.
		func() error { return write("c.tmp", "C", true) },
		func() error { return os.Rename(p("c.tmp"), p("c.final")) },
		// fsynced data, no directory fsync: the file vanishes.
		func() error { return write("nodirsync.txt", "N", true) },
		// a durable file unlinked, the unlink never made durable: it
		// comes back.
		func() error { return os.Remove(p("gone-later.txt")) },
		// a durable file overwritten in place and then extended, no
		// fsync: its old content comes back.
		func() error {
			f, err := os.OpenFile(p("old.txt"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("XXXXXXXXXXXXXXXX"), 0); err != nil {
				return err
			}
			return nil
		},
		// a new directory with a file; fsyncing the directory makes it
		// durable in its parent too.
		func() error { return os.Mkdir(p("sub"), 0o755) },
		func() error { return write("sub/f", "F", true) },
		func() error { return syncDir("sub") },
		// a.log truncated below its durable size, no fsync.
		func() error { return os.Truncate(p("a.log"), 2) },
		// a file renamed over a durable one, never made durable: the
		// durable one is back.
		func() error { return write("r.new", "NEW", true) },
		func() error { return os.Rename(p("r.new"), p("r.txt")) },
	}
	for i, s := range steps {
		if err := s(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

// tree reads every regular file under dir, by relative path.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isMounted(t *testing.T, dir string) bool {
	t.Helper()
	mps, err := mounts()
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(mps, func(m mount) bool { return m.dir == dir })
}

// runWriter mounts a powerfs over a directory with three durable files,
// runs the writer in another process and returns the mount and the dir.
func runWriter(t *testing.T, opts Options) (*FS, string) {
	t.Helper()
	requireFUSE(t)
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{"old.txt": "durable-old", "gone-later.txt": "keepme", "r.txt": "OLD"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Mount(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(context.Background()) })
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "POWERFS_HELPER=writer", "POWERFS_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writer: %v: %s", err, out)
	}
	return f, dir
}

// With Options.Journal any fsync also makes the name changes before it
// durable: what was renamed or created before a later fsync stays, what
// came after the last one is undone.
func TestCutJournalKeepsNamesBeforeTheLastFsync(t *testing.T) {
	f, dir := runWriter(t, Options{Journal: true})
	if _, err := f.Cut(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"a.log": "hello ", "b.final": "B", "c.final": "C", "nodirsync.txt": "N",
		"old.txt": "durable-old", "sub/f": "F", "r.txt": "OLD", "r.new": "NEW",
	}
	if got := tree(t, dir); !mapsEqual(got, want) {
		t.Errorf("after the cut: got %v, want %v", got, want)
	}
}

func TestCutKeepsExactlyTheDurableState(t *testing.T) {
	requireFUSE(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{"old.txt": "durable-old", "gone-later.txt": "keepme", "r.txt": "OLD"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Mount(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "POWERFS_HELPER=writer", "POWERFS_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writer: %v: %s", err, out)
	}
	live := map[string]string{
		"a.log": "he", "b.final": "B", "c.final": "C", "nodirsync.txt": "N",
		"old.txt": "XXXXXXXXXXXXXXXX", "sub/f": "F", "r.txt": "NEW",
	}
	if got := tree(t, dir); !mapsEqual(got, live) {
		t.Fatalf("before the cut: got %v, want %v", got, live)
	}

	res, err := f.Cut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"a.log": "hello ", "b.final": "B", "gone-later.txt": "keepme",
		"old.txt": "durable-old", "sub/f": "F", "r.txt": "OLD",
	}
	if got := tree(t, dir); !mapsEqual(got, want) {
		t.Errorf("after the cut: got %v, want %v", got, want)
	}
	if want := []string{"c.final", "nodirsync.txt", "r.txt"}; !slices.Equal(res.Vanished, want) {
		t.Errorf("vanished: got %v, want %v", res.Vanished, want)
	}
	if want := []string{"gone-later.txt", "r.txt"}; !slices.Equal(res.Returned, want) {
		t.Errorf("returned: got %v, want %v", res.Returned, want)
	}
	if want := []string{"a.log", "old.txt"}; !slices.Equal(res.Files, want) {
		t.Errorf("files cut back: got %v, want %v", res.Files, want)
	}
	// old.txt: 5 bytes past its durable 11 cut, 11 written back; a.log
	// ("he" of a durable "hello "): 4 written back.
	if res.Truncated != 5 || res.Restored != 15 {
		t.Errorf("truncated, restored: got %d, %d bytes, want 5, 15", res.Truncated, res.Restored)
	}

	// After the cut the mount is fresh: what is there is durable, and a
	// second cut changes nothing.
	res, err = f.Cut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := tree(t, dir); !mapsEqual(got, want) || res.Truncated+res.Restored != 0 || len(res.Vanished)+len(res.Returned) != 0 {
		t.Errorf("second cut: got %v and %+v, want %v and nothing cut", got, res, want)
	}

	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if isMounted(t, dir) {
		t.Fatalf("%s is still mounted after Close", dir)
	}
	if got := tree(t, dir); !mapsEqual(got, want) {
		t.Errorf("after Close the plain directory holds %v, want %v", got, want)
	}
	if _, err := os.Stat(lowerOf(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Close %s: got %v, want it gone", lowerOf(dir), err)
	}
	if err := f.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A process that dies while it serves a mount leaves a dead mount; Sweep
// ends it and gives the data back.
func TestSweepEndsADeadProcessMount(t *testing.T) {
	requireFUSE(t)
	root := t.TempDir()
	dir := filepath.Join(root, "node1", "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "POWERFS_HELPER=mounter", "POWERFS_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "mounted") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("mounter: %q, %v", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !isMounted(t, dir) {
		t.Fatalf("want the dead process's mount at %s left behind", dir)
	}
	if _, err := os.ReadDir(dir); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("reading the dead mount: got %v, want ENOTCONN", err)
	}

	// A live mount beside it is not swept.
	live := filepath.Join(root, "node2", "data")
	lf, err := Mount(live, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close(context.Background())

	got, err := Sweep(root)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{dir}) {
		t.Fatalf("swept: got %v, want [%s]", got, dir)
	}
	if isMounted(t, dir) {
		t.Fatalf("%s still mounted after Sweep", dir)
	}
	if !isMounted(t, live) {
		t.Fatalf("Sweep ended the live mount at %s", live)
	}
	if got, want := tree(t, dir), map[string]string{"x": "x"}; !mapsEqual(got, want) {
		t.Errorf("after Sweep: got %v, want %v", got, want)
	}
	if got, err := Sweep(root); err != nil || len(got) != 0 {
		t.Errorf("second Sweep: got %v, %v, want nothing", got, err)
	}
}

// TestCutAndCloseWithACopyInAnotherNamespace: a mount namespace made while
// the filesystem is mounted (here `unshare -m`, in the lab another node's
// machine) keeps a copy of the mount that the unmount here does not reach
// on a host without mount propagation. Cut and Close must still end the
// connection and return, and the cut must still keep the durable state.
func TestCutAndCloseWithACopyInAnotherNamespace(t *testing.T) {
	requireFUSE(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		testenv.Missing(t, "unshare (util-linux): "+err.Error())
	}
	dir := filepath.Join(t.TempDir(), "data")
	f, err := Mount(dir, Options{Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(context.Background()) })
	if err := os.WriteFile(filepath.Join(dir, "unsynced"), []byte("u"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Private: the copy never hears of the unmount here.
	holder := exec.Command(unshare, "--mount", "--propagation", "private", "sleep", "600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		mi, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", holder.Process.Pid))
		if strings.Contains(string(mi), dir) && strings.Contains(string(mi), FSType) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the namespace of pid %d has no copy of %s:\n%s", holder.Process.Pid, dir, mi)
		}
		time.Sleep(20 * time.Millisecond)
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		testenv.Missing(t, "nsenter (util-linux): "+err.Error())
	}
	// What a process in that namespace sees of the file, through the copy.
	readCopy := func() (string, error) {
		out, err := exec.Command(nsenter, "--target", fmt.Sprint(holder.Process.Pid), "--mount", "cat", filepath.Join(dir, "unsynced")).CombinedOutput()
		return string(out), err
	}
	if got, err := readCopy(); err != nil || got != "u" {
		t.Fatalf("the file through the other namespace's copy: %q, %v; want u", got, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := f.Cut(ctx)
	if err != nil {
		t.Fatalf("cut with a copy of the mount in another namespace: %v", err)
	}
	if !slices.Equal(res.Vanished, []string{"unsynced"}) {
		t.Errorf("cut: vanished %v, want [unsynced]", res.Vanished)
	}
	if err := os.WriteFile(filepath.Join(dir, "after"), []byte("a"), 0o644); err != nil {
		t.Fatalf("the mount after the cut: %v", err)
	}
	// The copy was cut off with the old connection; it never serves a tree
	// from before the cut.
	if got, err := readCopy(); err == nil || !strings.Contains(got, "not connected") {
		t.Errorf("the other namespace's copy after the cut: %q, %v; want transport endpoint is not connected", got, err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatalf("close with a copy of the mount in another namespace: %v", err)
	}
	if isMounted(t, dir) {
		t.Errorf("%s still mounted after Close", dir)
	}
}

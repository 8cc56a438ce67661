package loadgen

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Two processes re-rendering one run directory at once (redlab report while
// redlab merge reads it) each finish, and no temporary file is left behind.
func TestWriteJSONConcurrent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, SummaryFile)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if err := writeJSON(path, Summary{Requests: int64(w*100 + i)}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("writeJSON: %v", err)
	}
	var s Summary
	if err := readJSON(path, &s); err != nil {
		t.Errorf("after concurrent writes: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

// TestPrepareDir: an earlier run of the same kind is replaced as a whole, a
// directory of the other kind is refused, and other files are kept.
func TestPrepareDir(t *testing.T) {
	write := func(t *testing.T, path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(path string) bool { _, err := os.Stat(path); return err == nil }
	for _, tc := range []struct {
		name       string
		files      []string // in the directory before
		sweep      bool
		wantErr    string
		gone, kept []string
	}{
		{"missing", nil, false, "", nil, nil},
		{"an earlier run", []string{MetaFile, HTMLFile, "notes.txt"}, false, "", []string{MetaFile, HTMLFile, "notes.txt"}, nil},
		{"an earlier sweep", []string{SweepFile, "step-1/" + MetaFile}, true, "", []string{SweepFile, "step-1"}, nil},
		{"no run", []string{"notes.txt"}, false, "", nil, []string{"notes.txt"}},
		{"a sweep, not a run", []string{SweepFile}, false, "holds a sweep", nil, []string{SweepFile}},
		{"a run, not a sweep", []string{MetaFile}, true, "holds a run", nil, []string{MetaFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			for _, f := range tc.files {
				write(t, filepath.Join(dir, f))
			}
			err := PrepareDir(dir, tc.sweep)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
			}
			if !exists(dir) {
				t.Errorf("%s does not exist afterwards", dir)
			}
			for _, f := range tc.gone {
				if exists(filepath.Join(dir, f)) {
					t.Errorf("%s is still there", f)
				}
			}
			for _, f := range tc.kept {
				if !exists(filepath.Join(dir, f)) {
					t.Errorf("%s was removed", f)
				}
			}
		})
	}
}

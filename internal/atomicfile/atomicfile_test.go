package atomicfile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestWriteFileModeAndContent(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		perm os.FileMode
		body string
	}{
		{"plain", 0o644, "one\n"},
		{"script keeps its exec bit", 0o755, "#!/bin/sh\n"},
		{"private", 0o600, "secret\n"},
		{"group readable", 0o640, "shared\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			// Over an existing file with other permissions: the new mode wins.
			if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := WriteFile(path, []byte(tt.body), tt.perm); err != nil {
				t.Fatalf("WriteFile: %v", err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.body {
				t.Errorf("content: got %q, want %q", got, tt.body)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != tt.perm {
				t.Errorf("mode: got %v, want %v", st.Mode().Perm(), tt.perm)
			}
		})
	}
	assertNoTemps(t, dir)
}

// Writers racing on one path each finish, and the file holds one whole
// write. A fixed temporary name (path + ".tmp") fails here: one writer
// renames the temporary file another is still writing.
func TestWriteFileConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "status.json")
	const writers, rounds = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				if err := WriteJSON(path, map[string]int{"writer": w, "round": i, "pad": w * 1000}, 0o644); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent WriteJSON: %v", err)
	}
	var got map[string]int
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &got); err != nil || got["pad"] != got["writer"]*1000 {
		t.Errorf("final file: got %q (%v), want one whole write", b, err)
	}
	assertNoTemps(t, dir)
}

func TestWriteFileErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "such", "dir", "f.json")
	if err := WriteFile(missing, []byte("x"), 0o644); err == nil || !strings.HasPrefix(err.Error(), "atomicfile: ") {
		t.Errorf("missing directory: got %v, want an atomicfile: error", err)
	}
	if err := WriteJSON(filepath.Join(dir, "f.json"), func() {}, 0o644); err == nil {
		t.Error("unencodable value: got nil error")
	}
	// The old content survives a failed write.
	path := filepath.Join(dir, "keep.json")
	if err := WriteJSON(path, "old", 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(path, make(chan int), 0o644); err == nil {
		t.Error("unencodable value: got nil error")
	}
	if b, _ := os.ReadFile(path); string(b) != "\"old\"\n" {
		t.Errorf("after a failed write: got %q, want the old content", b)
	}
	assertNoTemps(t, dir)
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

func ExampleWriteJSON() {
	dir, err := os.MkdirTemp("", "atomicfile")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "run.json")
	if err := WriteJSON(path, map[string]int{"version": 1}, 0o644); err != nil {
		panic(err)
	}
	b, _ := os.ReadFile(path)
	fmt.Print(string(b))
	// Output:
	// {
	//   "version": 1
	// }
}

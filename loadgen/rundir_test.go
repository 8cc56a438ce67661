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

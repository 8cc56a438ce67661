package floor

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestMeasureDisk(t *testing.T) {
	for _, writers := range []int{1, 5} {
		t.Run("", func(t *testing.T) {
			dir := t.TempDir()
			d, err := MeasureDisk(context.Background(), dir, writers, 20*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if d.Writers != writers || d.RecordBytes != RecordBytes || d.Dir != dir {
				t.Errorf("got %d writers of %d bytes in %s, want %d of %d in %s", d.Writers, d.RecordBytes, d.Dir, writers, RecordBytes, dir)
			}
			if d.Syncs < int64(writers) || d.SyncsPerS <= 0 {
				t.Errorf("got %d syncs, %g/s, want at least %d and more than 0/s", d.Syncs, d.SyncsPerS, writers)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("got %d entries left in %s, want none", len(left), dir)
			}
		})
	}
}

func TestMeasureDiskErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dir     string
		writers int
		d       time.Duration
	}{
		{"no writer", t.TempDir(), 0, time.Millisecond},
		{"no time", t.TempDir(), 1, 0},
		{"no directory", "/nonexistent/floor", 1, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := MeasureDisk(context.Background(), tc.dir, tc.writers, tc.d); err == nil {
				t.Error("got nil error, want one")
			}
		})
	}
}

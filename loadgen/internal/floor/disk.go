package floor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// RecordBytes is the size of each append: about what a SET of a lock key
// with its token and TTL adds to an AOF.
const RecordBytes = 64

// Disk is one measurement of the disk: writers appending RecordBytes and
// syncing, each to its own file, for DurationS seconds.
type Disk struct {
	Dir         string  `json:"dir"`
	Writers     int     `json:"writers"`
	RecordBytes int     `json:"record_bytes"`
	Syncs       int64   `json:"syncs"` // appends, each followed by its sync, over all writers
	DurationS   float64 `json:"duration_s"`
	SyncsPerS   float64 `json:"syncs_per_s"` // over all writers
}

// MeasureDisk runs writers goroutines, each appending RecordBytes to its own
// file in a fresh directory under dir and syncing it (datasync), in a loop
// for d or until ctx ends, as that many redis-servers with appendfsync
// always append to their AOFs; the directory goes afterwards.
func MeasureDisk(ctx context.Context, dir string, writers int, d time.Duration) (Disk, error) {
	if writers < 1 || d <= 0 {
		return Disk{}, fmt.Errorf("floor: disk: %d writers for %v: want at least one writer for a while", writers, d)
	}
	tmp, err := os.MkdirTemp(dir, ".floor-disk-")
	if err != nil {
		return Disk{}, fmt.Errorf("floor: disk: %w", err)
	}
	defer os.RemoveAll(tmp)
	files := make([]*os.File, writers)
	for i := range files {
		f, err := os.OpenFile(filepath.Join(tmp, fmt.Sprintf("appendonly-%d.aof", i)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			for _, g := range files[:i] {
				g.Close()
			}
			return Disk{}, fmt.Errorf("floor: disk: %w", err)
		}
		files[i] = f
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	record := make([]byte, RecordBytes)
	for i := range record {
		record[i] = 'x'
	}
	record[RecordBytes-1] = '\n'

	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		syncs int64
		first error
	)
	start := time.Now()
	for _, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int64
			var err error
			// At least one append each, however short d: a rate
			// needs a sample.
			for {
				if _, err = f.Write(record); err != nil {
					break
				}
				if err = datasync(f); err != nil {
					break
				}
				n++
				if ctx.Err() != nil {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			syncs += n
			if err != nil && first == nil {
				first = err
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return Disk{}, fmt.Errorf("floor: disk: %w", first)
	}
	return Disk{Dir: dir, Writers: writers, RecordBytes: RecordBytes, Syncs: syncs,
		DurationS: elapsed.Seconds(), SyncsPerS: float64(syncs) / elapsed.Seconds()}, nil
}

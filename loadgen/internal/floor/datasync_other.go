//go:build !linux

package floor

import "os"

// datasync is fsync where there is no fdatasync, as redis-server does.
func datasync(f *os.File) error { return f.Sync() }

package floor

import (
	"os"
	"syscall"
)

// datasync is fdatasync, not fsync: it is what redis-server calls on its
// AOF on Linux (redis_fsync in its config.h), and it skips the inode's
// timestamps, which an append does not need durable (the size it does
// flush).
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

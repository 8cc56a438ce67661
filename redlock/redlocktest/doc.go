// Package redlocktest runs real, independent redis-server processes for the
// tests of code that takes Redlock locks, and the small pieces such tests
// share: a Client closed at cleanup, an Observer that keeps every Event, a
// node's command counts.
//
// Each node is its own process with its own data directory and
// configuration file, on a free loopback port, configured as Redlock's
// safety asks (AOF with appendfsync always, maxmemory-policy noeviction)
// unless Options say otherwise. Nodes can be stopped cleanly, killed,
// paused and restarted, and are killed when the test ends, or on Linux when
// the test process dies.
//
// redis-server must be on PATH. When it is not, the test fails if CI=true
// is set, so that a broken CI set-up cannot pass silently, and is skipped
// with a loud message otherwise. The package needs a Unix system.
package redlocktest

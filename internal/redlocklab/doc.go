// Package redlocklab tests and benchmarks the Redlock library (redlock/,
// a module of its own) with what only the lab has: the lab's fault front
// before a node (a slow, a silent and a saturated node), TLS nodes with
// certificates from the lab's CA, and go-redsync side by side for
// `make bench`. Every other test of the library lives with it and needs
// nothing but redis-server, so that the library's go.mod requires go-redis
// alone; TestLibraryModuleStandsAlone checks that from outside the
// repository.
//
// The package holds tests only.
package redlocklab

package redlock_test

import (
	"os"
	"testing"

	"github.com/redis/go-redis/v9/logging"

	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// sharedAddrs are five redis-server nodes started once by TestMain for the
// Example functions, which cannot take a *testing.T. Tests start their own
// via redlocktest.
var sharedAddrs []string

func TestMain(m *testing.M) {
	// Dead nodes are part of the tests; go-redis would log every refused dial.
	logging.Disable()
	os.Exit(redlocktest.Main(m, 5, func(addrs []string) { sharedAddrs = addrs }))
}

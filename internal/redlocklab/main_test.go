package redlocklab_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9/logging"

	"github.com/redlocklab/redlocklab/redlock/redlocktest"
)

// The node timeouts of the library's tests (redlock/redlock_test.go says
// which test takes which).
const (
	testTimeout = 250 * time.Millisecond
	calmTimeout = 5 * time.Second
)

// sharedAddrs are five redis-server nodes started once by TestMain for the
// benchmarks. Tests start their own.
var sharedAddrs []string

func TestMain(m *testing.M) {
	// Dead nodes are part of the tests; go-redis would log every refused dial.
	logging.Disable()
	os.Exit(redlocktest.Main(m, 5, func(addrs []string) { sharedAddrs = addrs }))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

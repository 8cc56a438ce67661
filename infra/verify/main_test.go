package verify

import (
	"os"
	"testing"

	"github.com/redis/go-redis/v9/logging"
)

func TestMain(m *testing.M) {
	// Nodes that are down on purpose (restarting, waiting for the clock) are
	// part of the tests; go-redis would log every refused dial.
	logging.Disable()
	os.Exit(m.Run())
}

package redlockprom_test

import (
	"os"
	"testing"

	"github.com/redis/go-redis/v9/logging"
)

func TestMain(m *testing.M) {
	// Dead nodes are part of the tests; go-redis would log every refused dial.
	logging.Disable()
	os.Exit(m.Run())
}

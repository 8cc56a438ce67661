package plan

import (
	"os"
	"testing"

	"github.com/redlocklab/redlocklab/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

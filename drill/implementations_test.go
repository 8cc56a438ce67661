package drill

import (
	"testing"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/hostfault"
	"github.com/redlocklab/redlocklab/infra/node"
)

// TestEveryFaultHasOneImplementation walks the catalogue: every kind on
// every target it allows has exactly one implementation among the lab's
// (process nodes, machine nodes, etcd members), the SSH transport's and
// the service process's, and none applies what the catalogue does not give
// its target.
func TestEveryFaultHasOneImplementation(t *testing.T) {
	impls := append(node.Implementations(), hostfault.Implementation(), serviceFaults.Implementation())
	if err := fault.CheckImplementations(impls...); err != nil {
		t.Fatal(err)
	}
	pairs := 0
	for _, d := range fault.Defs() {
		pairs += len(d.Targets)
	}
	kinds := 0
	for _, im := range impls {
		kinds += len(im.Kinds)
	}
	if kinds != pairs {
		t.Errorf("%d implemented (kind, target) pairs, want the catalogue's %d", kinds, pairs)
	}
}

package main

import (
	"errors"
	"fmt"

	"github.com/redlocklab/redlocklab/infra/lab"
)

// registerTarget registers a metrics endpoint (addr) with the Prometheus of
// the lab in stateDir when that lab runs with monitoring, and returns what
// unregisters it. Without a lab, or without monitoring, it does nothing:
// serve and load run anywhere.
func registerTarget(e *env, stateDir, job, addr string) (unregister func()) {
	unregister, err := lab.RegisterTarget(stateDir, job, addr, nil)
	switch {
	case errors.Is(err, lab.ErrNoMonitoring):
		return func() {}
	case err != nil:
		fmt.Fprintf(e.stderr, "redlab: metrics not registered with the lab's Prometheus: %v\n", err)
		return func() {}
	}
	fmt.Fprintf(e.stderr, "metrics registered with the lab's Prometheus (job %s, lab %s)\n", job, stateDir)
	return unregister
}

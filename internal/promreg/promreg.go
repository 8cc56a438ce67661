// Package promreg registers Prometheus collectors where several owners may
// share one registry (the replicas of a service in one process, a handler
// and its service): the first registers, the others reuse its collector.
package promreg

import (
	"errors"
	"reflect"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers *c on reg. When reg already holds a collector of the
// same Go type with the same descriptors, *c becomes that collector, so that
// every owner updates the same series. Any other failure (the same name with
// other labels or help, or of another type) is returned and *c is left as
// it was; the caller says what it was registering. Register never panics.
func Register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	if err == nil {
		return nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) && reflect.TypeOf(are.ExistingCollector) == reflect.TypeOf(*c) {
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
			return nil
		}
	}
	return err
}

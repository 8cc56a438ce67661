package hostfault

import (
	"errors"
	"fmt"

	"github.com/redlocklab/redlocklab/infra/fault"
	"github.com/redlocklab/redlocklab/infra/hosts"
)

// ErrUnknownKind is a fault kind the table does not have.
var ErrUnknownKind = errors.New("hostfault: unknown fault kind")

// ErrRefused marks a fault a host cannot take; *RefusedError says why.
var ErrRefused = errors.New("hostfault: refused")

// RefusedError is a fault that a type of host cannot take, with why.
type RefusedError struct {
	Kind string
	Type hosts.Type
	Why  string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("hostfault: %s on a %s host is refused: %s", e.Kind, e.Type, e.Why)
}

// Is makes errors.Is(err, ErrRefused) true, and errors.Is(err,
// fault.ErrUnsupported): the host cannot apply the fault.
func (e *RefusedError) Is(target error) bool {
	return target == ErrRefused || target == fault.ErrUnsupported
}

package inventory

import (
	"errors"
	"fmt"
)

// Errors a caller branches on; check them with errors.Is. Every failure of
// Service.Reserve is a *ReserveError wrapping one of them (or a context error,
// or a store error).
var (
	// ErrOutOfStock: the SKU holds fewer units than the request asked for.
	ErrOutOfStock = errors.New("inventory: out of stock")
	// ErrContended: the lock was held by someone else for the whole acquire
	// timeout. Retrying later is safe (request IDs make retries idempotent).
	ErrContended = errors.New("inventory: lock contended")
	// ErrUnavailable: the lock service could not be reached (too few nodes
	// answered, or answered too slowly for the lock to have any validity).
	ErrUnavailable = errors.New("inventory: lock unavailable")
	// ErrFenced: this holder's lock had been superseded by a newer fencing
	// token, so the store rejected its write; nothing was applied.
	ErrFenced = errors.New("inventory: stale fencing token, write rejected")
	// ErrInvalid: the request is malformed (SKU, quantity or request ID).
	ErrInvalid = errors.New("inventory: invalid request")
	// ErrNotFound: the SKU has never been seeded.
	ErrNotFound = errors.New("inventory: unknown sku")
	// ErrRequestIDReused: the request ID was already used for a reservation
	// of a different SKU or quantity; the original is left untouched.
	ErrRequestIDReused = errors.New("inventory: request_id already used for a different reservation")
)

// ReserveError is the error Service.Reserve returns: the cause and the lock
// timing gathered before the failure (a contended acquire still took time
// and attempts, which a load generator wants to record).
type ReserveError struct {
	Timing Timing
	Err    error
}

func (e *ReserveError) Error() string { return e.Err.Error() }

// Unwrap returns the cause, so errors.Is(err, ErrContended) works.
func (e *ReserveError) Unwrap() error { return e.Err }

// fieldError is an ErrInvalid naming the offending field, so the HTTP layer
// can answer with a field-specific error code.
type fieldError struct {
	field string // "sku", "quantity", "request_id", "stock"
	msg   string
}

func (e *fieldError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrInvalid, e.field, e.msg)
}

func (e *fieldError) Is(target error) bool { return target == ErrInvalid }

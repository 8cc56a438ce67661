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
	// ErrContended: the lock (for GuardDBForUpdate on PostgreSQL, the row
	// lock) was held by someone else for the whole acquire timeout.
	// Retrying later is safe (request IDs make retries idempotent).
	ErrContended = errors.New("inventory: lock contended")
	// ErrUnavailable: the lock service could not be reached (too few nodes
	// answered, or answered too slowly for the lock to have any validity;
	// for GuardDBForUpdate on SQLite, the database stayed locked past
	// SQLite's busy timeout).
	ErrUnavailable = errors.New("inventory: lock unavailable")
	// ErrOverloaded: the replica's lock client turned the request away
	// without trying the nodes: it waited in line for a place until its
	// round could no longer finish in time (redlock.ErrOverloaded).
	// Shedding what cannot be served in time is what keeps the rest of the
	// load served; retry later.
	ErrOverloaded = errors.New("inventory: lock client overloaded")
	// ErrConflict: an optimistic reservation (GuardDBVersion) found the row
	// changed under it on every one of its tries: others kept writing the
	// SKU between its read and its write. Nothing was applied; retrying
	// later is safe. It is the optimistic guard's "contended".
	ErrConflict = errors.New("inventory: version conflict: retries exhausted")
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
	// ErrRequestTimeout: the request's body did not reach the server within
	// its read timeout (HTTP 408); nothing was done.
	ErrRequestTimeout = errors.New("inventory: request body timed out")
)

// Errors of the HTTP client (Client) that say whether a failed request can
// have been carried out: the difference between a retry that is safe and
// one that must look in the ledger first. Request IDs make any retry safe
// against double reservations; these tell a load generator what to count.
var (
	// ErrNotSent: the request never reached the server whole (the dial
	// failed, the connection was refused, or it broke before the request
	// was written). Nothing was reserved.
	ErrNotSent = errors.New("inventory: request not sent")
	// ErrOutcomeUnknown: the request was sent but no answer came back (the
	// connection was reset or closed, or the client gave up waiting). It may
	// have committed: look its request ID up in the ledger, or retry it.
	ErrOutcomeUnknown = errors.New("inventory: request sent, outcome unknown")
	// ErrUnexpectedResponse: an answer that is not one of the API's (a
	// proxy's 502 page, a status and code the API does not pair). The
	// *APIError that wraps it carries the status.
	ErrUnexpectedResponse = errors.New("inventory: unexpected response")
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

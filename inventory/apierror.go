package inventory

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/redlocklab/redlocklab/inventory/internal/wire"
)

// APIError is an error answer of the HTTP API: the status, its stable code
// (see openapi.yaml) and a message for humans. It wraps the package error
// the code stands for (ErrContended for "contended", ErrInvalid for the
// invalid_* codes, …), nothing for the codes without one ("internal",
// "canceled"), and ErrUnexpectedResponse for an answer that is not the
// API's.
type APIError struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is the Retry-After header in seconds (0: none).
	RetryAfter int
	err        error
}

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("inventory: HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("inventory: HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// Unwrap returns the package error the answer stands for, if any.
func (e *APIError) Unwrap() error { return e.err }

// errorCode is one row of errorCodes.
type errorCode struct {
	code       string
	status     int
	err        error // what the code stands for; nil: no package error
	retryAfter int   // seconds
}

// errorCodes is the one table between the package's errors and the API's
// error answers. The server answers an error with the first row whose err
// it wraps (so the order is the precedence); the client turns an answer
// whose code and status match a row back into that row's err. A code not
// here cannot be answered (the openapi test checks the spec against it).
var errorCodes = []errorCode{
	{wire.CodeInvalidRequest, http.StatusBadRequest, ErrInvalid, 0},
	{wire.CodeInvalidJSON, http.StatusBadRequest, ErrInvalid, 0},
	{wire.CodeUnknownField, http.StatusBadRequest, ErrInvalid, 0},
	{wire.CodeInvalidSKU, http.StatusBadRequest, ErrInvalid, 0},
	{wire.CodeInvalidQuantity, http.StatusBadRequest, ErrInvalid, 0},
	{wire.CodeInvalidRequestID, http.StatusBadRequest, ErrInvalid, 0},
	{wire.CodeInvalidStock, http.StatusBadRequest, ErrInvalid, 0},
	{wire.CodeInvalidFault, http.StatusBadRequest, ErrInvalid, 0},
	{wire.CodeBodyTooLarge, http.StatusRequestEntityTooLarge, ErrInvalid, 0},
	{wire.CodeUnsupportedMediaType, http.StatusUnsupportedMediaType, ErrInvalid, 0},
	{wire.CodeSKUNotFound, http.StatusNotFound, ErrNotFound, 0},
	{wire.CodeOutOfStock, http.StatusConflict, ErrOutOfStock, 0},
	{wire.CodeRequestIDReused, http.StatusUnprocessableEntity, ErrRequestIDReused, 0},
	{wire.CodeContended, http.StatusServiceUnavailable, ErrContended, 1},
	{wire.CodeVersionConflict, http.StatusConflict, ErrConflict, 1},
	{wire.CodeUnavailable, http.StatusServiceUnavailable, ErrUnavailable, 2},
	{wire.CodeOverloaded, http.StatusServiceUnavailable, ErrOverloaded, 1},
	{wire.CodeFenced, http.StatusServiceUnavailable, ErrFenced, 1},
	{wire.CodeRequestTimeout, http.StatusRequestTimeout, ErrRequestTimeout, 0},
	{wire.CodeCanceled, http.StatusServiceUnavailable, nil, 1},
	{wire.CodeNotFound, http.StatusNotFound, nil, 0},
	{wire.CodeMethodNotAllowed, http.StatusMethodNotAllowed, nil, 0},
	{wire.CodeNotReady, http.StatusServiceUnavailable, nil, 2},
	{wire.CodeInternal, http.StatusInternalServerError, nil, 0},
}

// codeRow returns the row of code.
func codeRow(code string) (errorCode, bool) {
	for _, row := range errorCodes {
		if row.code == code {
			return row, true
		}
	}
	return errorCode{}, false
}

// answer is the server's error answer with code. A code missing from the
// table is a bug; it answers 500 rather than an undocumented status.
func answer(code, msg string) *APIError {
	row, ok := codeRow(code)
	if !ok {
		row, _ = codeRow(wire.CodeInternal)
		msg = "internal error"
	}
	return &APIError{Status: row.status, Code: row.code, Message: msg, RetryAfter: row.retryAfter, err: row.err}
}

// errorFor maps a package error to the server's answer.
func errorFor(err error) *APIError {
	var fe *fieldError
	if errors.As(err, &fe) {
		return answer(wire.InvalidCode(fe.field), err.Error())
	}
	for _, row := range errorCodes {
		if row.err != nil && errors.Is(err, row.err) {
			return answer(row.code, err.Error())
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return answer(wire.CodeCanceled, "the request was canceled before it completed")
	}
	return answer(wire.CodeInternal, "internal error")
}

// answerError is the client's reading of an error answer: the row's error
// when code and status match a row, else ErrUnexpectedResponse.
func answerError(status int, code, msg string, retryAfter int) *APIError {
	e := &APIError{Status: status, Code: code, Message: msg, RetryAfter: retryAfter, err: ErrUnexpectedResponse}
	if row, ok := codeRow(code); ok && row.status == status {
		e.err = row.err
	}
	return e
}

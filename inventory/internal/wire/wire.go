// Package wire is the inventory API's wire format: it spells the API's error
// codes and decodes and validates the JSON request bodies, strictly: one
// object of known fields, right types, nothing after it, within a size cap.
// It imports only the standard library, so its fuzz test builds and runs
// quickly.
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Input limits.
const (
	MaxBodyBytes    = 4 << 10
	MaxSKULen       = 64
	MaxRequestIDLen = 128
	MaxQuantity     = 1_000_000
	MaxStock        = 1_000_000_000_000
)

// Error is a rejected request body: a stable code (its HTTP status is
// inventory's to give) and a message for humans.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldError says which field is invalid and why.
type FieldError struct {
	Field, Msg string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// CheckSKU: 1..MaxSKULen characters of [A-Za-z0-9._:-].
func CheckSKU(sku string) *FieldError {
	if len(sku) == 0 || len(sku) > MaxSKULen {
		return &FieldError{"sku", fmt.Sprintf("must be 1..%d characters, got %d", MaxSKULen, len(sku))}
	}
	for i := 0; i < len(sku); i++ {
		c := sku[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return &FieldError{"sku", fmt.Sprintf("character %q at %d is not one of [A-Za-z0-9._:-]", c, i)}
		}
	}
	return nil
}

// CheckQuantity: 1..MaxQuantity.
func CheckQuantity(q int64) *FieldError {
	if q < 1 || q > MaxQuantity {
		return &FieldError{"quantity", fmt.Sprintf("must be 1..%d, got %d", MaxQuantity, q)}
	}
	return nil
}

// CheckRequestID: 1..MaxRequestIDLen printable ASCII characters, no spaces.
func CheckRequestID(id string) *FieldError {
	if len(id) == 0 || len(id) > MaxRequestIDLen {
		return &FieldError{"request_id", fmt.Sprintf("must be 1..%d characters, got %d", MaxRequestIDLen, len(id))}
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return &FieldError{"request_id", fmt.Sprintf("character %q at %d is not printable ASCII", c, i)}
		}
	}
	return nil
}

// CheckStock: 0..MaxStock.
func CheckStock(n int64) *FieldError {
	if n < 0 || n > MaxStock {
		return &FieldError{"stock", fmt.Sprintf("must be 0..%d, got %d", int64(MaxStock), n)}
	}
	return nil
}

// invalid turns a FieldError into an error with code invalid_<field>.
func invalid(fe *FieldError) *Error {
	return &Error{Code: InvalidCode(fe.Field), Message: fe.Error()}
}

// DecodeObject reads a JSON object body into its raw fields. It enforces the
// content type (application/json, UTF-8, no content encoding), the size cap
// (body should come from http.MaxBytesReader), a single object with nothing
// after it, and that every key is one of allowed, exactly: stricter than
// encoding/json's DisallowUnknownFields, which matches keys
// case-insensitively.
func DecodeObject(header http.Header, body io.Reader, allowed ...string) (map[string]json.RawMessage, *Error) {
	ct := header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || mt != "application/json" {
		return nil, errorf(CodeUnsupportedMediaType, "Content-Type must be application/json, got %q", ct)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return nil, errorf(CodeUnsupportedMediaType, "charset must be utf-8, got %q", cs)
	}
	if ce := header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return nil, errorf(CodeUnsupportedMediaType, "Content-Encoding %q is not supported", ce)
	}
	b, err := io.ReadAll(io.LimitReader(body, MaxBodyBytes+1))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) || len(b) > MaxBodyBytes {
		return nil, errorf(CodeBodyTooLarge, "body exceeds %d bytes", MaxBodyBytes)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The server's read timeout cut the body off: the client was too
		// slow, its JSON was not wrong.
		return nil, errorf(CodeRequestTimeout, "the body did not arrive within the server's read timeout")
	}
	if err != nil {
		return nil, errorf(CodeInvalidJSON, "reading the body failed")
	}
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return nil, errorf(CodeInvalidJSON, "empty body, want a JSON object")
	}
	if b[0] != '{' {
		return nil, errorf(CodeInvalidJSON, "body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var fields map[string]json.RawMessage
	if err := dec.Decode(&fields); err != nil {
		return nil, errorf(CodeInvalidJSON, "malformed JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errorf(CodeInvalidJSON, "unexpected data after the JSON object")
	}
	var unknown []string
	for k := range fields {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, errorf(CodeUnknownField, "unknown field(s) %s; allowed: %s",
			strings.Join(unknown, ", "), strings.Join(allowed, ", "))
	}
	return fields, nil
}

// Field decodes fields[name] into dst. A missing or null field, or one of
// the wrong type, is an error with code invalid_<name>; want says what is
// expected ("a string").
func Field(fields map[string]json.RawMessage, name string, dst any, want string) *Error {
	raw, ok := fields[name]
	if !ok || string(raw) == "null" {
		return errorf(InvalidCode(name), "%s is required", name)
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return errorf(InvalidCode(name), "%s must be %s", name, want)
	}
	return nil
}

// What Field says a bad quantity or stock should be, formatted once.
var (
	wantQuantity = fmt.Sprintf("an integer 1..%d", MaxQuantity)
	wantStock    = fmt.Sprintf("an integer 0..%d", int64(MaxStock))
)

// Reservation is the body of POST /v1/reservations, as the client encodes
// it and DecodeReservation reads it.
type Reservation struct {
	SKU       string `json:"sku"`
	Quantity  int64  `json:"quantity"`
	RequestID string `json:"request_id"`
}

// Stock is the body of PUT /v1/stock/{sku}, as the client encodes it and
// DecodeStock reads it.
type Stock struct {
	Stock int64 `json:"stock"`
}

// DecodeReservation reads and validates a reservation body.
func DecodeReservation(header http.Header, body io.Reader) (Reservation, *Error) {
	fields, werr := DecodeObject(header, body, "sku", "quantity", "request_id")
	if werr != nil {
		return Reservation{}, werr
	}
	var r Reservation
	if werr := Field(fields, "sku", &r.SKU, "a string"); werr != nil {
		return Reservation{}, werr
	}
	if werr := Field(fields, "quantity", &r.Quantity, wantQuantity); werr != nil {
		return Reservation{}, werr
	}
	if werr := Field(fields, "request_id", &r.RequestID, "a string"); werr != nil {
		return Reservation{}, werr
	}
	for _, fe := range []*FieldError{CheckSKU(r.SKU), CheckQuantity(r.Quantity), CheckRequestID(r.RequestID)} {
		if fe != nil {
			return Reservation{}, invalid(fe)
		}
	}
	return r, nil
}

// DecodeStock reads and validates the body of PUT /v1/stock/{sku}.
func DecodeStock(header http.Header, body io.Reader) (int64, *Error) {
	fields, werr := DecodeObject(header, body, "stock")
	if werr != nil {
		return 0, werr
	}
	var n int64
	if werr := Field(fields, "stock", &n, wantStock); werr != nil {
		return 0, werr
	}
	if fe := CheckStock(n); fe != nil {
		return 0, invalid(fe)
	}
	return n, nil
}

package wire

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// knownCodes are the error codes request decoding may answer with.
var knownCodes = map[string]bool{
	CodeUnsupportedMediaType: true,
	CodeBodyTooLarge:         true,
	CodeInvalidJSON:          true,
	CodeUnknownField:         true,
	CodeInvalidSKU:           true,
	CodeInvalidQuantity:      true,
	CodeInvalidRequestID:     true,
}

// FuzzDecodeRequest: whatever the body and content type, decoding either
// yields a request that passes validation or an error with a known code; it
// never panics. In CI:
//
//	go test -run '^$' -fuzz '^FuzzDecodeRequest$' -fuzztime 10s ./inventory/internal/wire/
func FuzzDecodeRequest(f *testing.F) {
	seeds := []struct{ ct, body string }{
		{"application/json", `{"sku":"widget","quantity":1,"request_id":"r-1"}`},
		{"application/json; charset=utf-8", `{"sku":"a.b:c_d-9","quantity":1000000,"request_id":"` + strings.Repeat("z", 128) + `"}`},
		{"application/json", `{"sku":"widget","quantity":0,"request_id":"r"}`},
		{"application/json", `{"sku":"widget","quantity":-9223372036854775808,"request_id":"r"}`},
		{"application/json", `{"sku":"widget","quantity":1e308,"request_id":"r"}`},
		{"application/json", `{"sku":"\u0000","quantity":1,"request_id":"\ud800"}`},
		{"application/json", `{"sku":"widget","quantity":1,"request_id":"r"} trailing`},
		{"application/json", `{"sku":"widget","sku":"other","quantity":1,"request_id":"r"}`},
		{"application/json", `{"Sku":"widget","quantity":1,"request_id":"r"}`},
		{"application/json", `[{"sku":"widget"}]`},
		{"application/json", `{"sku":{"nested":[1,2,{"deep":null}]}}`},
		{"application/json", "\xff\xfe{}"},
		{"application/json", ``},
		{"text/plain", `{"sku":"widget","quantity":1,"request_id":"r"}`},
		{"", `{}`},
		{"application/json; charset=utf-16", `{}`},
		{"application/json", `{"sku":"` + strings.Repeat("a", MaxBodyBytes) + `"}`},
	}
	for _, s := range seeds {
		f.Add(s.ct, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		header := http.Header{}
		header.Set("Content-Type", contentType)
		limited := http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(body)), MaxBodyBytes)
		req, werr := DecodeReservation(header, limited)
		if werr == nil {
			for _, fe := range []*FieldError{CheckSKU(req.SKU), CheckQuantity(req.Quantity), CheckRequestID(req.RequestID)} {
				if fe != nil {
					t.Fatalf("decoded %+v from %q, which fails validation: %v", req, body, fe)
				}
			}
			if len(body) > MaxBodyBytes {
				t.Fatalf("accepted a %d-byte body, cap is %d", len(body), MaxBodyBytes)
			}
			return
		}
		if !knownCodes[werr.Code] {
			t.Fatalf("got %q for %q %q; want a known code", werr.Code, contentType, body)
		}
	})
}

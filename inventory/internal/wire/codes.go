package wire

// The HTTP API's error codes: the one place they are spelled. They are
// stable, and clients branch on them; inventory's error table gives each
// its status and the package error it stands for, for the server and the
// client alike.
const (
	CodeInvalidJSON          = "invalid_json"
	CodeUnknownField         = "unknown_field"
	CodeInvalidSKU           = "invalid_sku"
	CodeInvalidQuantity      = "invalid_quantity"
	CodeInvalidRequestID     = "invalid_request_id"
	CodeInvalidStock         = "invalid_stock"
	CodeInvalidRequest       = "invalid_request"
	CodeInvalidFault         = "invalid_fault"
	CodeBodyTooLarge         = "body_too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeRequestTimeout       = "request_timeout"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeSKUNotFound          = "sku_not_found"
	CodeOutOfStock           = "out_of_stock"
	CodeRequestIDReused      = "request_id_reused"
	CodeContended            = "contended"
	CodeVersionConflict      = "version_conflict"
	CodeUnavailable          = "unavailable"
	CodeOverloaded           = "overloaded"
	CodeFenced               = "fenced"
	CodeCanceled             = "canceled"
	CodeNotReady             = "not_ready"
	CodeInternal             = "internal"
)

// InvalidCode is the code of an invalid field: invalid_<field> (field is
// "sku", "quantity", "request_id" or "stock").
func InvalidCode(field string) string { return "invalid_" + field }

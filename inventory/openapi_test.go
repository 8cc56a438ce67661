package inventory

import (
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// TestOpenAPIMatchesRoutes keeps openapi.yaml honest: the same paths and
// methods as the router, and every error code the API can answer with.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	raw, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		OpenAPI    string                    `yaml:"openapi"`
		Paths      map[string]map[string]any `yaml:"paths"`
		Components struct {
			Schemas struct {
				ErrorDetail struct {
					Properties struct {
						Code struct {
							Enum []string `yaml:"enum"`
						} `yaml:"code"`
					} `yaml:"properties"`
				} `yaml:"ErrorDetail"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(spec.OpenAPI, "3.") {
		t.Errorf("openapi: got %q, want 3.x", spec.OpenAPI)
	}

	h, _, _ := newAPI(t, WithFaults(NewFaults()))
	hh := h.(*handler)
	probe := map[string]string{ // spec path -> a concrete path
		"/v1/reservations": "/v1/reservations",
		"/v1/stock/{sku}":  "/v1/stock/x",
		"/healthz":         "/healthz",
		"/readyz":          "/readyz",
		"/metrics":         "/metrics",
		"/v1/faults/pause": "/v1/faults/pause",
	}
	for specPath := range spec.Paths {
		if _, ok := probe[specPath]; !ok {
			t.Errorf("openapi.yaml documents %s, which the router does not serve", specPath)
		}
	}
	for specPath, concrete := range probe {
		ops, ok := spec.Paths[specPath]
		if !ok {
			t.Errorf("route %s is not in openapi.yaml", specPath)
			continue
		}
		var documented []string
		for k := range ops {
			switch k {
			case "get", "put", "post", "delete", "patch":
				documented = append(documented, strings.ToUpper(k))
			}
		}
		var served []string
		for m := range hh.route(httptest.NewRequest("GET", concrete, nil)).methods {
			served = append(served, m)
		}
		sort.Strings(documented)
		sort.Strings(served)
		if strings.Join(documented, ",") != strings.Join(served, ",") {
			t.Errorf("%s: openapi.yaml documents %v, the router serves %v", specPath, documented, served)
		}
	}

	enum := map[string]bool{}
	for _, c := range spec.Components.Schemas.ErrorDetail.Properties.Code.Enum {
		enum[c] = true
	}
	for _, code := range []string{
		"invalid_json", "unknown_field", "invalid_sku", "invalid_quantity", "invalid_request_id", "invalid_stock",
		"invalid_fault", "body_too_large", "unsupported_media_type", "method_not_allowed", "not_found",
		"sku_not_found", "out_of_stock", "request_id_reused", "contended", "unavailable", "fenced", "canceled",
		"not_ready", "internal",
	} {
		if !enum[code] {
			t.Errorf("error code %q is missing from ErrorDetail.code's enum", code)
		}
	}
}

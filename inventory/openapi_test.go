package inventory

import (
	"os"
	"slices"
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
				Reservation struct {
					Properties struct {
						Guard struct {
							Enum []string `yaml:"enum"`
						} `yaml:"guard"`
					} `yaml:"properties"`
				} `yaml:"Reservation"`
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
	if got, want := spec.Components.Schemas.Reservation.Properties.Guard.Enum, strings.Split(JoinGuards(Guards()), ", "); !slices.Equal(got, want) {
		t.Errorf("Reservation.guard's enum: got %v, want the service's guards %v", got, want)
	}

	h, _, _ := newAPI(t, WithFaults(NewFaults()))
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
		// The router's own answer says what it serves: a method no route
		// takes gets 405 with the route's methods in Allow.
		res := do(t, h, "PATCH", concrete, "", "")
		var served []string
		for _, m := range strings.Split(res.header.Get("Allow"), ", ") {
			if m != "HEAD" && m != "" {
				served = append(served, m)
			}
		}
		sort.Strings(documented)
		sort.Strings(served)
		if strings.Join(documented, ",") != strings.Join(served, ",") {
			t.Errorf("%s: openapi.yaml documents %v, the router serves %v", specPath, documented, served)
		}
	}

	// Every code the error table can answer with is documented, and every
	// documented code is one the table knows.
	enum := map[string]bool{}
	for _, c := range spec.Components.Schemas.ErrorDetail.Properties.Code.Enum {
		enum[c] = true
	}
	table := map[string]bool{}
	for _, row := range errorCodes {
		table[row.code] = true
		if !enum[row.code] {
			t.Errorf("error code %q is missing from ErrorDetail.code's enum", row.code)
		}
	}
	for c := range enum {
		if !table[c] {
			t.Errorf("openapi.yaml documents error code %q, which the error table does not know", c)
		}
	}
}

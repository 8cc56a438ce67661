# redlock-lab. `make demo` runs the main job; `make test` is what CI runs.
SHELL := /bin/bash
GO    ?= go
# tofu or terraform from PATH, else the one `make tools` builds into ./bin.
TF    ?= $(shell command -v tofu 2>/dev/null || command -v terraform 2>/dev/null || echo $(CURDIR)/bin/tofu)
export REDLAB_TF := $(TF)

.PHONY: all build test test-go test-infra test-dashboards bench demo tools fmt vet validate-aws clean

all: build

build:
	$(GO) build -o bin/redlab ./cmd/redlab

## test: everything CI runs (race detector on).
test: vet test-go test-infra test-dashboards

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

test-go:
	$(GO) test -race -count=1 -timeout 20m ./...

test-infra:
	@true

test-dashboards:
	@true

## bench: the side-by-side Redlock comparison table (five local nodes).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2000x ./redlock/ | tee bin/bench.txt

demo:
	@echo "demo: not wired yet"; exit 1

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin .redlab

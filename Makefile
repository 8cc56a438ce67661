# redlock-lab. `make demo` runs the main job; `make test` is what CI runs.
SHELL := /bin/bash
GO    ?= go
# tofu or terraform from PATH, else the one `make tools` builds into ./bin.
TF    ?= $(shell command -v tofu 2>/dev/null || command -v terraform 2>/dev/null || echo $(CURDIR)/bin/tofu)
export REDLAB_TF := $(TF)
# No update checks from terraform on every run (the network is closed anyway).
export CHECKPOINT_DISABLE := 1
# The test database scripts/setup.sh prepared: it writes the URL, with the
# cluster's real port, to bin/postgres-dsn on every run. Read here rather than
# in a recipe so that every target sees it (`make test-go` after one set-up);
# `make test` runs the set-up first and then a sub-make, which reads the file
# fresh. An exported REDLAB_TEST_POSTGRES wins.
ifeq ($(strip $(REDLAB_TEST_POSTGRES)),)
REDLAB_TEST_POSTGRES := $(shell cat bin/postgres-dsn 2>/dev/null)
endif
export REDLAB_TEST_POSTGRES
TOFU_LDFLAGS := -X github.com/opentofu/opentofu/version.dev=no

.PHONY: capacity cost explore tlscost drills drills-ssh plan-ssh publish-matrix test-fuzz lab-up lab-down all build test test-go test-infra bench demo tools etcd fmt vet validate-aws clean deps setup-demo setup-test test-setup

all: build

# -buildvcs=auto: the commit in `redlab version` and in what explore records,
# even where GOFLAGS turns stamping off.
build:
	$(GO) build -buildvcs=auto -o bin/redlab ./cmd/redlab

## test: everything CI runs (race detector on), after the set-up it needs.
## A sub-make, so that the checks start only once the set-up is done (also
## under -j) and see what it made (bin/postgres-dsn, bin/tofu).
test: setup-test
	@$(MAKE) --no-print-directory vet test-go test-fuzz test-infra

## deps: the set-up `make test` runs (packages, PostgreSQL role and database,
## OpenTofu when no tofu/terraform), on its own. See scripts/setup.sh.
deps: setup-test
setup-test:
	@bash scripts/setup.sh test
setup-demo:
	@bash scripts/setup.sh demo

## test-setup: the set-up script's own test (needs root; .ci/run runs it).
test-setup:
	bash scripts/setup_test.sh

## The Go modules here: the lab (this directory), the Redlock library and
## its Prometheus adapter, modules of their own (redlock/README.md says why;
## go.mod replaces both with this checkout). vet and test-go cover each.
## tools/ and tools/etcd only pin programs to build.
MODULES := . redlock redlock/redlockprom

vet:
	@set -e; for m in $(MODULES); do echo "(cd $$m && $(GO) vet ./...)"; (cd $$m && $(GO) vet ./...); done
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

## test-go: the library's modules, then the lab's; the drill, explore and
## plan packages run alone, one after the other, after the rest: their CI
## drills, searches and sweeps run a lab and a load, and must not share two
## cores with other packages (a starved host makes a drill INVALID).
test-go:
	@set -e; for m in $(filter-out .,$(MODULES)); do echo "(cd $$m && $(GO) test -race -count=1 -timeout 20m ./...)"; (cd $$m && $(GO) test -race -count=1 -timeout 20m ./...); done
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v -e '/drill$$' -e '/drill/explore$$' -e '/drill/plan$$')
	$(GO) test -race -count=1 -timeout 20m -p 1 ./drill/ ./drill/explore/ ./drill/plan/

## test-fuzz: the request decoder's fuzz test, briefly.
test-fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime 10s ./inventory/internal/wire/

test-infra:
	@command -v $(TF) >/dev/null 2>&1 || { echo "test-infra: $(TF) not found: install tofu or terraform, or run 'make tools'"; exit 1; }
	$(TF) fmt -check -recursive -diff infra
	cd infra/modules/redis-node && $(TF) test
	cd infra/modules/node-generations && $(TF) test
	cd infra/modules/etcd-member && $(TF) test
	cd infra/envs/local && d=$$(mktemp -d) && TF_DATA_DIR=$$d $(TF) init -input=false -no-color >/dev/null && TF_DATA_DIR=$$d $(TF) test -no-color; rc=$$?; rm -rf $$d; exit $$rc

## tools: build OpenTofu from the Go module proxy into ./bin (only needed when
## neither tofu nor terraform is on PATH; slow: ~10 min on 2 cores).
tools: bin/tofu
bin/tofu: tools/go.mod tools/go.sum
	cd tools && $(GO) build -ldflags "$(TOFU_LDFLAGS)" -o ../bin/tofu github.com/opentofu/opentofu/cmd/tofu

## etcd: the etcd server and etcdctl, built from the Go module proxy into
## ./bin at the version tools/etcd/go.mod pins (the tests and the lab use
## bin/etcd; scripts/setup.sh test builds both when missing or of another
## version). About 1.5 min on 2 cores with a cold build cache.
etcd: bin/etcd bin/etcdctl
bin/etcd: tools/etcd/go.mod tools/etcd/go.sum
	cd tools/etcd && $(GO) build -o ../../bin/etcd go.etcd.io/etcd/server/v3
bin/etcdctl: tools/etcd/go.mod tools/etcd/go.sum
	cd tools/etcd && $(GO) build -o ../../bin/etcdctl go.etcd.io/etcd/etcdctl/v3

## validate-aws: needs a reachable provider registry (not available in this lab).
validate-aws:
	cd infra/modules/aws && $(TF) init -backend=false -input=false && $(TF) validate
	cd infra/envs/aws && $(TF) init -backend=false -input=false && $(TF) validate


## bench: the side-by-side Redlock comparison table (five local nodes, 5 rounds,
## medians: time per lock+unlock, acquire p50/p99, lock+unlock p99, healthy, one
## node 20 ms slow and one down); one lock+unlock of this library, redsync FailFast
## and the quorum fan-out floor taking turns iteration by iteration (appendfsync no,
## healthy and one node slow, 8 rounds: p50, p99 and their ratios); worker pools in a closed loop (1, 16, 64 and
## 256 workers on fresh keys, 64 on 8 hot keys: locks/s, lock+unlock p50/p99 and
## errors against redsync and the raw fan-out, 3 runs); goodput when a saturated node set is offered
## one, three and eight times its capacity; the load generator's own cost per
## operation; the seeding of 100,000 SKUs.
bench:
	@mkdir -p bin
	set -o pipefail; for i in 1 2 3 4 5; do $(GO) test -run '^$$' -bench Lock -benchmem -benchtime 400x ./internal/redlocklab/ || exit 1; done | tee bin/bench.txt
	set -o pipefail; $(GO) test -run '^$$' -bench Interleaved -benchtime 2000x -count 8 ./internal/redlocklab/ | tee -a bin/bench.txt
	set -o pipefail; $(GO) test -run '^$$' -bench ClosedLoop -benchtime 3000x -count 3 ./internal/redlocklab/ | tee -a bin/bench.txt
	$(GO) run ./internal/redlocklab/benchtable < bin/bench.txt | tee bin/bench.md
	$(GO) test -run '^$$' -bench Saturated -benchtime 1x ./internal/redlocklab/ | tee bin/bench-saturated.txt
	$(GO) test -run '^$$' -bench Engine -benchtime 2000000x ./loadgen/ | tee bin/bench-loadgen.txt
	$(GO) test -run '^$$' -bench SeedMany -benchtime 3x ./inventory/ | tee bin/bench-seed.txt

## capacity: the capacity table of README.md: knee, CPU per reservation,
## goodput at three times the knee and the recovery after a spike past it,
## through the lab fronts and direct, with appendfsync always and everysec;
## about 25 minutes on an otherwise idle machine. CAPACITY_QUICK=1 checks the
## script in about a minute and leaves README.md alone. See scripts/capacity.sh.
capacity: setup-demo
	GO=$(GO) bash scripts/capacity.sh

## cost: the price of safety in runbooks/README.md's decision guide: every
## guard on one lab (5 Redis nodes, 3 etcd members), latency and CPU per
## reservation at 50/s, the knee and goodput at three times it; about 25
## minutes on an otherwise idle machine. COST_QUICK=1 checks the script and leaves the runbooks alone.
## See scripts/cost.sh. (setup-test: it builds bin/etcd.)
cost: setup-test
	GO=$(GO) bash scripts/cost.sh

## tlscost: the price of TLS on the lab (docs/benchmarks.md): a plain and a
## TLS lab side by side, loads alternating (acquire latency, CPU per
## reservation), a fresh connection's cost and a client's outage after a
## node kill; about 4 minutes. See scripts/tlscost.sh.
tlscost: setup-demo
	GO=$(GO) bash scripts/tlscost.sh

## demo: the main job on the embedded defaults: lab up, 30 s of load through the
## redlock guard with zipf keys, summary + report.html path, lab down.
demo: setup-demo
	GO=$(GO) ./scripts/demo.sh

## drills: every drill of runbooks/drills on the local lab, and the matrix
## (runs/drills/matrix.md, .json, .html) and its coverage; about 18 minutes on
## two cores.
drills: build
	bin/redlab drill --matrix runbooks/drills --out runs/drills

## explore: ten minutes of seeded random fault schedules against every guard
## on one lab with the operating rules followed (the README's "Exploring"
## rates), then ten with the rules broken (everysec, no restart delay), its
## findings shrunk to runbooks in runs/explore-found (runbooks/found holds
## the ones published); about 40 minutes with the shrinking.
## EXPLORE_SEED picks the seed.
EXPLORE_SEED ?= 1
explore: build
	bin/redlab explore --seed $(EXPLORE_SEED) --budget 10m --no-shrink --out runs/explore
	bin/redlab explore --seed $(EXPLORE_SEED) --budget 10m --lab '{persistence: everysec, restart_delay: 0s}' --out runs/explore-rules-broken --found runs/explore-found --shrink-budget 15m

## drills-ssh: one-node-loss and minority-partition over SSH on a lab of five
## machines brought up with --machines --ssh (drill --hosts on the inventory
## the lab writes), then a search over SSH on such a lab, one of which is
## SIGKILLed and must leave nothing on the hosts; alone, not in make test
## (five machines and a search do not share two cores with the suite).
## About five minutes; root.
drills-ssh: build
	REDLAB_DRILLS_SSH=1 $(GO) test -count=1 -timeout 20m -run '^TestHostsDrillsOnSSHLab$$' -v ./drill/
	REDLAB_DRILLS_SSH=1 $(GO) test -count=1 -timeout 20m -run '^TestExploreOnSSHHosts$$' -v ./drill/explore/

## plan-ssh: redlab plan on the hosts of a lab of three machines brought up
## with --machines --ssh (each data disk and clock measured over SSH, a
## short sweep), alone; `make test` runs it too. About half a minute; root.
plan-ssh: build
	$(GO) test -count=1 -timeout 20m -run '^TestPlanOnSSHLab$$' -v ./drill/plan/

## publish-matrix: the measured matrix into README.md and runbooks/README.md.
publish-matrix:
	bash scripts/publish-matrix.sh runs/drills/matrix.md

fmt:
	gofmt -w $$(git ls-files '*.go')

## lab-up / lab-down: the five-node local lab (see README, "Local lab").
lab-up: build
	bin/redlab lab up

lab-down:
	-test -x bin/redlab && bin/redlab lab down

clean: lab-down
	rm -rf bin .redlab

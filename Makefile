# Production Go for AI gateways — every command a learner, instructor or
# maintainer needs. `make` alone lists them.

SHELL        := /bin/bash
GO           ?= go
LABCTL       := bin/labctl
LABCTL_SRC   := $(shell find cmd/labctl internal/labkit -name '*.go' -not -name '*_test.go') go.mod labs/catalog.json
STRESS_COUNT ?= 50
LAB          ?=
K            ?=

.DEFAULT_GOAL := help
.PHONY: help run test ci lint vet fmt-check tidy-check stress stress-short bench bench-http integration checklist \
        progress hint watch verify grade tools clean \
        lab-01 lab-02 lab-03 lab-04 lab-05 lab-06 lab-07 lab-08

help: ## list the commands
	@echo "Production Go for AI gateways"
	@echo
	@echo "learners:     make lab-01 … make lab-08   make progress   make hint LAB=01   make watch LAB=01"
	@echo "instructors:  make grade [TESTS=dir]      (see docs/instructor-guide.md)"
	@echo "maintainers:  make test   make ci   make verify   make stress   make bench"
	@echo
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-14s %s\n", $$1, $$2}'

$(LABCTL): $(LABCTL_SRC)
	@mkdir -p bin
	@$(GO) build -o $@ ./cmd/labctl

# ---- learners -------------------------------------------------------------

LABS := lab-01 lab-02 lab-03 lab-04 lab-05 lab-06 lab-07 lab-08

# Explicit targets, not a pattern rule: make skips implicit rules for .PHONY targets.
$(LABS): $(LABCTL) ## run lab NN's tests (-race), first failure + hint: make lab-01
	@$(LABCTL) test $(patsubst lab-%,%,$@)

progress: $(LABCTL) ## table of labs: tests passing / total, done marks
	@$(LABCTL) list

hint: $(LABCTL) ## next hint for a lab: make hint LAB=01 [K=2]
	@test -n "$(LAB)" || { echo "usage: make hint LAB=01 [K=2]"; exit 2; }
	@$(LABCTL) hint $(LAB) $(K)

watch: $(LABCTL) ## re-run a lab's tests on every save: make watch LAB=01
	@test -n "$(LAB)" || { echo "usage: make watch LAB=01"; exit 2; }
	@$(LABCTL) watch $(LAB)

run: ## start the reference gateway on 127.0.0.1:8080 (ARGS="-h" lists its flags)
	$(GO) run ./solutions/production_app $(ARGS)

# ---- instructors ----------------------------------------------------------

grade: $(LABCTL) ## grade every lab with pristine tests (+ TESTS=dir held-back); reports in grade-report/
	@$(LABCTL) grade $(if $(TESTS),--tests $(TESTS)) $(if $(REF),--pristine-ref $(REF))

# ---- maintainers ----------------------------------------------------------

test: vet $(LABCTL) ## vet + solutions and tooling under -race + verify
	$(GO) test -race ./solutions/... ./internal/... ./cmd/...
	@$(LABCTL) verify

verify: $(LABCTL) ## tests identical, stubs red test by test, solutions green, mutants killed
	@$(LABCTL) verify

ci: lint test stress-short integration ## what CI runs (.ci/run calls this); ends with the real-Redis gate

vet: ## go vet on everything, stubs included
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

tidy-check:
	$(GO) mod tidy -diff
	$(GO) mod verify

lint: fmt-check vet tidy-check ## gofmt, vet, staticcheck, go mod tidy/verify, actionlint
	$(GO) tool staticcheck ./...
	$(GO) tool actionlint

stress: ## every solution's tests -race -count=$(STRESS_COUNT) -shuffle=on
	$(GO) test -race -count=$(STRESS_COUNT) -shuffle=on ./solutions/...

stress-short: ## the shorter stress pass CI runs
	$(MAKE) --no-print-directory stress STRESS_COUNT=10

INTEGRATION_REQUIRED_TESTS := TestIntegrationRedisHelperReachesRealRedis,TestIntegrationAtomicAcrossTwoClients

integration: $(LABCTL) ## real-Redis tests with REDIS_INTEGRATION_REQUIRED=1; a skip is a failure
	@$(LABCTL) integration -require $(INTEGRATION_REQUIRED_TESTS)

checklist: ## run every test checklist/PRODUCTION_READINESS.md names
	@tests=$$(grep -o 'Test[A-Za-z0-9]*' checklist/PRODUCTION_READINESS.md | sort -u | paste -sd'|' -); \
	$(GO) test -race -count=1 -run "^($$tests)$$" ./solutions/... ./internal/...

bench-http: ## production_app vs a bare reverse proxy, wrk, interleaved (about 2 minutes)
	scripts/bench-http.sh

bench: ## every benchmark, with allocations
	$(GO) test -run '^$$' -bench . -benchmem ./solutions/...

clean: ## remove built tools and reports
	rm -rf bin grade-report .labctl

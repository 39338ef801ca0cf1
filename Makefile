# Production Go for AI gateways — every command a learner, instructor or
# maintainer needs. `make` alone lists them.

SHELL        := /bin/bash
GO           ?= go
LABCTL       := bin/labctl
LABCTL_SRC   := $(shell find cmd/labctl internal/labkit internal/interview internal/testkit/redismark -name '*.go' -not -name '*_test.go') go.mod go.sum
STRESS_COUNT ?= 50
LAB          ?=
K            ?=
# Which tracks this checkout holds: the course both; a learner template
# one (labctl export -track labs|write), and `make` lists only its own.
HAS_LABS     := $(wildcard labs/*/*.go)
HAS_WRITE    := $(wildcard solutions write/kit.tar.gz)
LABS         := lab-01 lab-02 lab-03 lab-04 lab-05 lab-06 lab-07 lab-08 lab-09 lab-10 lab-11 lab-12
WRITES       := $(patsubst lab-%,write-%,$(LABS))

# The race detector sleeps a second before a -race test binary exits, in
# case goroutines still running race; every package here ends its tests with
# goleak.VerifyTestMain, so none are left, and the second is pure wait: most
# of a lab's run. (labctl sets the same for the runs it starts.)
export GORACE ?= atexit_sleep_ms=0

.DEFAULT_GOAL := help
.PHONY: help run run-secure test prove walk test-template test-sdk test-k8s test-stack stack-up stack-down sdk-node ci lint vet fmt-check tidy-check no-binaries stress stress-short bench bench-http bench-redis \
        integration checklist fuzz scenario soak-short progress hint watch interview verify grade clean $(LABS) \
        $(WRITES) write-check write-cold

help:
	@echo "Production Go for AI gateways"
	@echo
ifneq ($(HAS_LABS),)
	@echo "learners — run a lab's tests (under 3 s once compiled; the first run compiles for ~1–2 min):"
	@sed -n 's/.*"number": *"\([0-9]*\)".*"title": *"\([^"]*\)".*/  make lab-\1   \2/p' labs/catalog.json
	@echo
endif
ifneq ($(HAS_WRITE),)
	@echo "the test-writing track — your tests against the reference, scored by the mutants they kill:"
	@echo "  make $(firstword $(WRITES)) … make $(lastword $(WRITES))   (the file to edit: write/NN-topic/write_test.go)"
	@echo
endif
	@echo "and:"
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-13s %s\n", $$1, $$2}'

# The Makefile rebuilds labctl when its sources change. A cold build takes a
# minute, so say so before it starts. labctl is built with -race, not to
# hunt races in it (its tests do that) but to share the build cache with the
# -race test runs that follow: a learner's first `make lab-NN` compiles the
# standard library once instead of twice (on the reference machine, 92 s
# instead of 104 s for labctl and lab 03 together, cold).
$(LABCTL): $(LABCTL_SRC)
	@echo "building labctl, the lab runner (the first build downloads and compiles dependencies, ~1 min)…"
	@mkdir -p bin
	@$(GO) build -race -o $@ ./cmd/labctl

# ---- learners -------------------------------------------------------------

# Explicit targets, not a pattern rule: make skips implicit rules for .PHONY targets.
$(LABS): $(LABCTL)
	@$(LABCTL) test $(patsubst lab-%,%,$@)

# The test-writing track: your tests in write/NN-topic/write_test.go run on
# the reference, then on each of the lab's mutants; the last line is
# "write NN: killed K/N mutants". MUTANTS=dir adds an instructor's bank.
$(WRITES): $(LABCTL)
	@$(LABCTL) write $(patsubst write-%,%,$@) $(if $(MUTANTS),--mutants $(MUTANTS))

progress: $(LABCTL) ## where you are: per lab, tests passing (or, in the test-writing template, tests written); what to do next
	@$(LABCTL) list

hint: $(LABCTL) ## the next hint you have not seen: make hint LAB=01 (K=2 shows hint 2)
	@test -n "$(LAB)" || { echo "usage: make hint LAB=01 [K=2]"; exit 2; }
	@$(LABCTL) hint $(LAB) $(K)

watch: $(LABCTL) ## re-run a lab's tests on every save: make watch LAB=01 (q quits)
	@test -n "$(LAB)" || { echo "usage: make watch LAB=01"; exit 2; }
	@$(LABCTL) watch $(LAB)

# A mock interview round from docs/interview (the index: docs/interview-prep.md).
# SEED unset or 0 means a new draw; labctl prints its seed, so SEED=that
# repeats it.
interview: $(LABCTL) ## a timed mock interview round: a question, your time, then its answer and rubric (ROUND=lightning|deep-dive|debugging|design, N=3, SEED=7)
	@$(LABCTL) interview --round $(or $(ROUND),lightning) $(if $(N),--n $(N)) $(if $(filter-out 0,$(SEED)),--seed $(SEED))

prove: ## check your lab 07 limiter or lab 12 quota for linearizability (porcupine): 16 callers on miniredis, then on a Redis of its own stalled and restarted when redis-server is on PATH (LAB=07|12)
	@case "$(LAB)" in 07|12) ;; "") echo "prove: say which lab: make prove LAB=07 (or LAB=12)"; exit 2;; *) echo "prove: lab $(LAB) has no linearizability check (labs 07 and 12 have)"; exit 2;; esac; \
	$(GO) test -tags prove -count=1 -v -run '^TestProve' ./labs/$(LAB)-*/

run: ## start the reference gateway on 127.0.0.1:8080 (ARGS="-h" lists its flags)
	$(GO) run ./solutions/production_app $(ARGS)

run-secure: ## secure_app on :8080, metrics on :9464, a Redis of its own if REDIS_URL is unset, and a dev token
	@ARGS="$(ARGS)" scripts/run-secure.sh

# ---- instructors ----------------------------------------------------------

write-check: $(LABCTL) ## maintainers: each lab's own tests through the test-writing harness must kill every mutant
	@set -eo pipefail; for n in $(patsubst lab-%,%,$(LABS)); do $(LABCTL) write $$n --self-check | tail -1; done

write-cold: $(LABCTL) ## maintainers: the suites written cold from the lessons (write/testdata/cold) score what docs/instructor-guide.md says
	@for f in write/testdata/cold/*.go.txt; do n=$$(basename $$f .go.txt); $(LABCTL) write $$n --tests $$f 2>/dev/null | tail -1; done | diff -u write/testdata/cold/scores.txt - && echo "write-cold: every suite scores what the table says"

grade: $(LABCTL) ## grade the tracks here: labs on the pristine tests (TESTS=dir adds held-back ones), your tests by mutants killed (MUTANTS=dir adds a bank); reports in grade-report/
	@$(LABCTL) grade $(if $(TESTS),--tests $(TESTS)) $(if $(MUTANTS),--mutants $(MUTANTS)) $(if $(REF),--pristine-ref $(REF))

# ---- maintainers ----------------------------------------------------------

# `make test` is the quick gate: the test suites (go test runs vet's checks
# on each package in the same compile) and the lab conventions that need no
# extra run (identical, black-box, stubs red). `make verify` and `make ci`
# add the kill matrix, full lint, the SDK test, stress and real Redis.
test: $(LABCTL) ## the labs' references, the gateway and tooling under -race (-short: the template round trip is make test-template), then labctl verify -fast
	$(GO) test -race -short ./solutions/... ./gateway/... ./internal/... ./cmd/...
	@$(LABCTL) verify -fast

test-template: ## export both learner templates and hold each to its promises: no answer of its track in any form, what the guide says it holds; lab 01 solved and graded in one, a cold suite scored in the other
	$(GO) test -race -count=1 -run '^TestExported(Template|WriteTemplate)' ./cmd/labctl/

verify: $(LABCTL) ## tests identical, stubs red one by one, solutions green, every mutant killed (cached)
	@$(LABCTL) verify

test-sdk: ## the official OpenAI Go SDK against both services and the wire format (build tag sdk; a large compile)
	$(GO) test -race -tags sdk ./gateway/chatapi/ ./solutions/production_app/... ./solutions/secure_app/...

test-k8s: ## deploy/k8s decoded strictly with the Kubernetes API types and checked against secure_app (build tag k8s)
	$(GO) test -race -tags k8s -run '^TestK8s' ./internal/repocheck/

sdk-node: ## the official OpenAI Node SDK against make run's gateway (needs node and npm; about 30 s)
	@scripts/sdk-node.sh

test-stack: ## the compose file, dashboard and Prometheus checks without Docker (-tags stack; a real Prometheus if on PATH)
	@if [ "$${STACK_PROMETHEUS_REQUIRED:-}" = 1 ]; then export REDIS_INTEGRATION_REQUIRED=1; fi; \
	$(GO) test -race -count=1 -tags stack ./internal/stack/

stack-up: ## the full stack in Docker: 2 secure_app replicas, mockupstream, Redis, collector, Prometheus, Grafana on :3000 (needs a Docker engine)
	@scripts/stack.sh up

stack-down: ## stop and remove the full stack
	@scripts/stack.sh down

SEED ?= 0

scenario: ## run a scenario and write its report with charts: make scenario NAME=brownout [SEED=7] (NAME=list lists them; NAME=soak takes DURATION=2m, 10m by default)
	@test -n "$(NAME)" || { echo "usage: make scenario NAME=brownout (make scenario NAME=list lists them)"; exit 2; }
	@if [ "$(NAME)" = list ]; then $(GO) run ./cmd/scenario -list; else DURATION="$(DURATION)" $(GO) run ./cmd/scenario -name $(NAME) -seed $(SEED); fi

soak-short: ## the soak scenario for 2 minutes (make ci): nothing lost, no leak, Redis keys settle, tokens exact; its report goes to a temporary directory
	@out=$$(mktemp -d); DURATION=2m $(GO) run ./cmd/scenario -name soak -seed 1 -out "$$out"; rc=$$?; \
	if [ $$rc -eq 0 ]; then rm -rf "$$out"; else echo "soak-short: exit status $$rc; the report, if written, is kept in $$out/soak"; \
	  ls "$$out/soak" 2>/dev/null; cat "$$out/soak/summary.json" 2>/dev/null | head -c 4000; echo; fi; exit $$rc

FUZZTIME ?= 20s

fuzz: ## run every fuzz target for FUZZTIME each (default 20s); CI runs their seed corpora as tests
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./gateway/chatapi/
	$(GO) test -run '^$$' -fuzz '^FuzzValidAgreesWithEncodingJSON$$' -fuzztime $(FUZZTIME) ./gateway/chatapi/
	$(GO) test -run '^$$' -fuzz '^FuzzReadAnswerAgreesWithAGetPerField$$' -fuzztime $(FUZZTIME) ./gateway/chatapi/
	$(GO) test -run '^$$' -fuzz '^FuzzReadMessagesAgreesWithAGetPerField$$' -fuzztime $(FUZZTIME) ./gateway/chatapi/
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME) ./gateway/identity/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./gateway/policy/

ci: lint test test-template verify write-cold test-sdk test-k8s test-stack sdk-node stress-short integration soak-short checklist ## what CI runs (.ci/run calls this): lint, tests, labs, the test-writing harness, SDKs, k8s, the stack, stress, real Redis, a 2-minute soak, the checklist

# In CI the stack test may not skip: no prometheus (or Redis) fails it.
ci: export STACK_PROMETHEUS_REQUIRED := 1

# Lint vets the code behind the build tags too, so the testcontainers path
# and the SDK test keep compiling though the default build leaves them out.
LINT_TAGS := testcontainers,sdk,k8s,stack,failsafe,prove,vectors,quotavectors
# write/NN-topic holds a learner's tests and, once make write-NN ran, the
# reference laid out next to them for reading: neither is maintained code.
LINT_PKGS = $(shell $(GO) list -tags $(LINT_TAGS) ./... | grep -v '/write/')

vet:
	@echo "go vet -tags $(LINT_TAGS) (every package but write/)"
	@$(GO) vet -tags $(LINT_TAGS) $(LINT_PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

tidy-check:
	$(GO) mod tidy -diff
	$(GO) mod verify

no-binaries:
	@scripts/check-no-binaries.sh

lint: fmt-check no-binaries vet tidy-check ## gofmt, no tracked binaries, vet, staticcheck, go mod tidy/verify, actionlint
	@echo "staticcheck -tags $(LINT_TAGS) (every package but write/)"
	@$(GO) tool staticcheck -tags $(LINT_TAGS) $(LINT_PKGS)
	$(GO) tool actionlint

stress: ## every reference's and gateway package's tests -race -shuffle=on, 50 times each (STRESS_COUNT=n)
	$(GO) test -race -count=$(STRESS_COUNT) -shuffle=on ./solutions/... ./gateway/...

stress-short: ## the shorter stress pass CI runs (10 times each)
	$(MAKE) --no-print-directory stress STRESS_COUNT=10

INTEGRATION_REQUIRED_TESTS := TestIntegrationRedisHelperReachesRealRedis,TestIntegrationAtomicAcrossTwoClients,TestIntegrationTwoReplicasShareOneTokenQuota,TestIntegrationParallelReservesAtANearlySpentQuotaDoNotOvershoot,TestIntegrationLeasesCapInFlightAcrossReplicas,TestIntegrationClusterSharesOneQuotaAndKeepsATenantInOneSlot,TestIntegrationTwoReplicasShareOneRateLimit,TestIntegrationTwoReplicasShareOneRateLimitOnARedisCluster,TestIntegrationRedisDownFailsClosedOrOpenAsConfigured,TestIntegrationClusterModeSpeaksTLSWithAPassword,TestIntegrationParallelReservesNeverOvershootTheQuota,TestIntegrationSettlesFromEveryReplicaAddUp,TestIntegrationNaiveQuotaOvershootsWhenReadsInterleave,TestIntegrationTheRateLimiterIsLinearizable,TestIntegrationTheNaiveRateLimiterIsCaught,TestIntegrationTheConcurrencyLeasesAreLinearizable,TestIntegrationTheTokenQuotaIsLinearizable,TestIntegrationTheNaiveTokenQuotaIsCaught

integration: $(LABCTL) ## real-Redis tests with REDIS_INTEGRATION_REQUIRED=1; a skip is a failure
	@$(LABCTL) integration -require $(INTEGRATION_REQUIRED_TESTS)

checklist: $(LABCTL) ## the production-readiness checklist: one ✓/✗ line per item, exit 1 on any ✗ (ONLY=ADM,SEC-4)
	@$(LABCTL) checklist $(if $(ONLY),-only $(ONLY))

bench-redis: ## the shared rate limiter on one Redis: pipelined, plain and go-redis/redis_rate side by side, 32 goroutines (a redis-server of its own unless REDIS_URL)
	@ARGS="$(ARGS)" scripts/bench-redis.sh

walk: ## follow one chat completion through the code with dlv trace and count its stays, rooms and returns to a room already left (about 5 minutes; docs/architecture.md)
	@scripts/walk.sh

bench-http: ## production_app vs a bare reverse proxy, wrk, interleaved (about 2 minutes; BASE_REF=ref also runs production_app as built at ref)
	scripts/bench-http.sh

bench: ## every benchmark, with allocations
	$(GO) test -run '^$$' -bench . -benchmem ./solutions/... ./gateway/...

clean: ## remove built tools, reports and labctl's caches (hint progress too)
	rm -rf bin grade-report .labctl

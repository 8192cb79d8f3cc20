# Fila's build. Every target runs from the repository root; the Go
# workspace (go.work) ties the modules together, and `work` names all of
# their packages.

GO       ?= go
BIN      := $(CURDIR)/bin
PKGS     := work
FUZZTIME ?= 30s
# staticcheck, at a pinned version, fetched through the module proxy.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
# The Python client's interpreter and type checker (Debian's python3 and mypy
# on a fresh machine; .ci/run installs them).
PYTHON ?= python3
MYPY   ?= mypy
# The Python client's conformance driver, run from any directory.
PYDRIVER = env PYTHONPATH=$(CURDIR)/clients/python/src $(PYTHON) -m fila.conformance
# apidiff, at a pinned version, fetched through the module proxy.
APIDIFF ?= golang.org/x/exp/cmd/apidiff@v0.0.0-20261113113407-e3970619a1a4

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

.PHONY: build
build: ## build bin/fila-server and bin/fila
	$(GO) build -o $(BIN)/fila-server ./broker/cmd/fila-server
	$(GO) build -o $(BIN)/fila ./cli/cmd/fila

.PHONY: run
run: build ## build and run the broker: port 5555, data in ./data, no config file needed
	$(BIN)/fila-server

.PHONY: test
test: build build-faults ## run every test (unit, property, end-to-end, generated-code freshness)
	FILA_TEST_SERVER_BIN=$(BIN)/fila-server FILA_TEST_CLI_BIN=$(BIN)/fila \
		FILA_TEST_RACE_SERVER_BIN=$(BIN)/race/fila-server-faults FILA_TEST_FAULTS_SERVER_BIN=$(BIN)/fila-server-faults \
		$(GO) test -count=1 -timeout 25m $(PKGS)
	$(MAKE) test-typescript
	$(MAKE) test-python

.PHONY: test-typescript
test-typescript: build ## the TypeScript client (clients/typescript): npm ci, tsc, node --test (with a live fila-server), and the conformance transcripts in core mode, client mode and live-broker mode
	cd clients/typescript && npm ci --no-audit --no-fund && npm run build
	cd clients/typescript && FILA_TEST_SERVER_BIN=$(BIN)/fila-server node --test dist/test/
	cd conformance && $(GO) run ./cmd/fila-conformance core -exec "node $(CURDIR)/clients/typescript/dist/conformance.js core" testdata
	cd conformance && $(GO) run ./cmd/fila-conformance client -exec "node $(CURDIR)/clients/typescript/dist/conformance.js client" testdata
	cd conformance && $(GO) run ./cmd/fila-conformance client -exec "node $(CURDIR)/clients/typescript/dist/conformance.js client" -live -server-bin $(BIN)/fila-server testdata

.PHONY: test-python
test-python: build ## the Python client (clients/python): unittest (with a live fila-server), mypy --strict, and the conformance transcripts in core mode, client mode and against a live fila-server
	cd clients/python && PYTHONPATH=src FILA_TEST_SERVER_BIN=$(BIN)/fila-server $(PYTHON) -m unittest discover -s tests -t .
	@if command -v $(MYPY) >/dev/null; then echo 'cd clients/python && $(MYPY) --strict src/fila'; cd clients/python && $(MYPY) --strict src/fila; \
	else echo 'test-python: $(MYPY) not found, type check skipped (apt-get install mypy; .ci/run installs it)'; fi
	cd conformance && $(GO) run ./cmd/fila-conformance core -exec "$(PYDRIVER) core" testdata
	cd conformance && $(GO) run ./cmd/fila-conformance client -exec "$(PYDRIVER) client" testdata
	cd conformance && $(GO) run ./cmd/fila-conformance client -live -server-bin $(BIN)/fila-server -exec "$(PYDRIVER) client" testdata

.PHONY: build-race
build-race: ## build bin/race/fila-server and bin/race/fila with the race detector
	$(GO) build -race -o $(BIN)/race/fila-server ./broker/cmd/fila-server
	$(GO) build -race -o $(BIN)/race/fila ./cli/cmd/fila

.PHONY: build-faults
build-faults: ## build bin/race/fila-server-faults (race detector) and bin/fila-server-faults with fault injection, for the storage-failure and partition tests
	$(GO) build -race -tags filafaults -o $(BIN)/race/fila-server-faults ./broker/cmd/fila-server
	$(GO) build -tags filafaults -o $(BIN)/fila-server-faults ./broker/cmd/fila-server

.PHONY: race
race: build-race build-faults ## run every test with the race detector, end-to-end tests against a race-built fila-server
	FILA_TEST_SERVER_BIN=$(BIN)/race/fila-server FILA_TEST_CLI_BIN=$(BIN)/race/fila \
		FILA_TEST_RACE_SERVER_BIN=$(BIN)/race/fila-server-faults \
		$(GO) test -race -count=1 -timeout 60m $(PKGS)

.PHONY: gen
gen: ## regenerate the codec, error mappings and docs/protocol.md from spec/
	$(GO) run ./gen

.PHONY: check-gen
check-gen: ## fail if a generated file is stale
	$(GO) run ./gen -check

.PHONY: lint
lint: check-gen ## vet, gofmt, staticcheck, and the architecture's rules (import direction, determinism)
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l bench broker cli conformance gen sdk); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(STATICCHECK) $(PKGS)
	$(GO) test -count=1 ./broker/internal/archlint

.PHONY: fuzz
fuzz: ## run each fuzz target for FUZZTIME (default 30s), one at a time
	@for pkg in $$($(GO) list $(PKGS)); do \
		dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
		for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
			echo "== $$pkg $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

.PHONY: conformance
conformance: build ## replay the conformance transcripts against the client core and a live broker
	cd conformance && FILA_TEST_SERVER_BIN=$(BIN)/fila-server $(GO) test -count=1 -run 'TestCore|TestBroker' .

.PHONY: kill-loop
kill-loop: build ## SIGKILL a loaded fila-server 25 times and check nothing acknowledged is lost (KILLS=25)
	FILA_TEST_SERVER_BIN=$(BIN)/fila-server FILA_KILL_LOOPS=$${KILLS:-25} \
		$(GO) test -count=1 -timeout 30m -run '^TestKillLoop$$' -v ./broker/e2e

.PHONY: million
million: build ## fill a fila-server with 1,000,000 pending 1 KiB messages over 1,000 keys (N= for another count), SIGKILL it, restart it, check every acknowledged message comes back exactly once; logs fill rate, RSS, restart time, drain rate
	FILA_TEST_SERVER_BIN=$(BIN)/fila-server FILA_TEST_MILLION=1 FILA_TEST_MILLION_N=$${N:-1000000} \
		$(GO) test -count=1 -timeout 30m -run '^TestMillionPendingRestart$$' -v ./broker/e2e

.PHONY: bench-queues
bench-queues: build ## 10,000 queues (QUEUES=) idle, with 5 messages each, and idle on a one-node cluster: RSS, restart time, creation rate, /metrics scrape cost, about 2 minutes (PROFILES=dir saves pprof profiles)
	FILA_TEST_SERVER_BIN=$(BIN)/fila-server FILA_BENCH_PROFILES=$(PROFILES) \
		$(GO) test -count=1 -timeout 60m -run '^$$' -bench '^BenchmarkManyQueues$$' -benchtime 1x ./broker/e2e -e2e.queues=$${QUEUES:-10000}

.PHONY: cluster-soak
cluster-soak: build build-faults ## three fila-server processes under load and faults: leader SIGKILLed 20 times (KILLS=20), follower restart, leader isolated, leader SIGSTOPped, 20 flapping partitions of 1-10s (FLAPS=20; SEED= to repeat a schedule), slow fsyncs, meta leader lost, all restarted, a queue moved and a node leading about 100 of 400 queues drained (DRAIN_QUEUES=400) under load; each history checked
	FILA_TEST_SERVER_BIN=$(BIN)/fila-server FILA_TEST_FAULTS_SERVER_BIN=$(BIN)/fila-server-faults FILA_TEST_CLUSTER_KILLS=$${KILLS:-20} \
		FILA_TEST_FLAPS=$${FLAPS:-20} FILA_TEST_FLAP_MAX=10s FILA_TEST_SEED=$${SEED:-} FILA_TEST_DRAIN_QUEUES=$${DRAIN_QUEUES:-400} \
		$(GO) test -count=1 -timeout 60m -run '^TestCluster' -v ./broker/e2e

.PHONY: break-it
break-it: build ## a producer and consumer while hostile clients take turns, 20s phases (PHASE=20s), attackers at niceness 19 (NICE=19; NICE= for none), about 4 minutes; table in bench/results/break-it.md
	FILA_TEST_SERVER_BIN=$(BIN)/fila-server FILA_BREAKIT_PHASE=$${PHASE:-20s} FILA_BREAKIT_NICE=$${NICE-19} FILA_BREAKIT_OUT=$(CURDIR)/bench/results/break-it.md \
		$(GO) test -count=1 -timeout 30m -run '^TestBreakIt$$' -v ./broker/e2e
	@echo; cat $(CURDIR)/bench/results/break-it.md

.PHONY: bench-clients
bench-clients: build ## produce and consume throughput of the Go, Python and (if built) TypeScript clients against one fila-server: 1 KiB, 256 outstanding, prefetch 1024 (COUNT= messages, default 50000); prints a table
	BIN=$(BIN) PYTHON=$(PYTHON) scripts/bench-clients.sh

.PHONY: bench-compare
bench-compare: ## Fila beside NATS JetStream (default sync, sync always) and RabbitMQ quorum queues (if installed), about 5 minutes; results in bench/results
	cd bench && $(GO) run ./cmd/compare -out results

.PHONY: bench-compare-cluster
bench-compare-cluster: ## three-node clusters of Fila, NATS JetStream (default sync, sync always) and RabbitMQ (if installed), and Fila on one node, about 4 minutes; results in bench/results/compare-cluster.md
	cd bench && $(GO) run ./cmd/compare -cluster -out results

# make replay writes a new bench/results/replay-<UTC time> (ignored by git);
# make replay FORCE=1 overwrites the reference run in bench/results/replay.
REPLAY_OUT = $(if $(FORCE),-force -out results/replay)

.PHONY: replay
replay: ## replay the Google trace (../shared/data) at 600x in FIFO, DRR and STFQ, each alone on a fresh fila-server, about 23 minutes; report in a new bench/results/replay-<time> (FORCE=1: overwrite bench/results/replay)
	cd bench && $(GO) run ./cmd/replay $(REPLAY_OUT) -- --speedup 600

.PHONY: replay-sim
replay-sim: ## simulate the Google trace replay (../shared/data) on the scheduler alone, fake clock, for each policy, in about a second; prints how many users kept their p99 wait within 2x
	cd broker && FILA_TRACE=$(abspath ../shared/data/google_clusterdata2011_job_submits_days16-18.csv) $(GO) test ./internal/sched -run TestTraceSimulation -count=1 -v

.PHONY: bench
bench: ## run the Go benchmarks
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

.PHONY: release-check
release-check: ## compare the API of sdk/core and sdk/go with each one's previous tag (apidiff); incompatible changes fail unless NEXT=vX.Y.Z is a major bump (a minor one at v0)
	APIDIFF=$(APIDIFF) NEXT=$(NEXT) bash scripts/release-check.sh

.PHONY: dist
dist: ## release archives of fila-server and fila for linux/amd64 and linux/arm64, static, with SHA256SUMS, in dist/ (VERSION= names the version)
	VERSION=$(VERSION) bash scripts/dist.sh

.PHONY: docker-lint
docker-lint: ## lint the Dockerfile (dockerfile-utils, through npx)
	npx --yes dockerfile-utils@0.16.3 lint Dockerfile

.PHONY: clean
clean: ## remove bin/ and dist/ (not ./data)
	rm -rf $(BIN) $(CURDIR)/dist

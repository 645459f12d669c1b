# historyd's one command surface. `make help` lists the targets; every target needs only Go (and
# git for proto-check): the tools are pinned in go.mod and tools/go.mod and run with `go tool`. The
# client targets (gen-clients, gen-python, gen-ts, python-test, ts-test) need their languages' tools
# too: Debian's protoc and python3 packages, Node.js 20 and npm; proto-check checks each client's
# stubs only where its generator is installed, and says so where it is not.

.POSIX:

GO ?= go
TOOLS = $(GO) tool -modfile=tools/go.mod
BUF = $(TOOLS) buf
# build's output and extra build tags: the e2e tests build into a temporary directory, and build a
# second binary with TAGS=historyd_testhook; deploy/Dockerfile builds with the defaults.
BIN ?= bin/historyd
TAGS ?=
# The toolchain of shipped builds and of the vulnerability scan: newer than go.mod's go line, which
# stays at the machines' Go so that everything else runs on it (docs/development.md#go-version).
RELEASE_TOOLCHAIN = go1.27.3
# The Python client's interpreter: Debian's, which sees the python3-grpcio, python3-protobuf and
# python3-pytest* packages (a pyenv python3 first on PATH does not; PyPI is not reachable).
PYTHON ?= /usr/bin/python3
# The protoc whose output the committed Python stubs are (Debian 12's protobuf-compiler).
PYTHON_STUBS_PROTOC = libprotoc 3.21.12
# The offline vulnerability database's source (vuln.go.dev is not reachable; docs/development.md#govulncheck).
VULNDB_MODULE = golang.org/x/vulndb@v0.0.0-20261105234957-e22db6528018

.PHONY: help run build release test gen gen-clients gen-python gen-ts proto-check lint e2e e2e-pg crash hostile ts-test python-test bench vuln fuzz-smoke clean

help: ## Show this help
	@echo 'usage: make TARGET'
	@awk -F ':.*## ' '/^[a-z][a-z0-9-]*:.*## / { printf "  %-12s %s\n", $$1, $$2 }' Makefile

# At a terminal, historyd runs as its own job (sh -m): Ctrl-C reaches historyd alone, which shuts
# down and exits 0, and so does make. Without job control, make would get the SIGINT too and end
# by it whatever historyd returned (GNU make re-raises it on itself). exec, so that no shell stays
# behind historyd: once it exits nothing holds ./data's lock, and the next make run starts at once.
run: build ## Build bin/historyd and run it on 127.0.0.1:50051, its data in ./data; Ctrl-C stops it (ARGS='--flag value'; HISTORYD_* variables: see README)
	@echo '$(BIN) $(ARGS)'; \
	if [ -t 0 ]; then exec sh -mc '"$$0" "$$@"' $(BIN) $(ARGS); else exec $(BIN) $(ARGS); fi

# build is static (CGO_ENABLED=0) like the release: historyd needs no C, and a cgo build's glibc
# reserves 64 MiB of address space per malloc arena and 8 MiB per thread stack, so under an
# address-space limit (prlimit --as, as make hostile runs it) it ran out of memory with 260 MB in use.
build: ## Build bin/historyd, static, version and commit stamped from git (BIN=path, TAGS=build tags)
	@v=$$(git describe --always --dirty 2>/dev/null || echo dev); \
	c=$$(git rev-parse HEAD 2>/dev/null || echo unknown); \
	echo "CGO_ENABLED=0 $(GO) build -trimpath -tags '$(TAGS)' -ldflags '-X main.version=$$v -X main.commit=$$c' -o $(BIN) ./cmd/historyd"; \
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(TAGS)' -ldflags "-X main.version=$$v -X main.commit=$$c" -o $(BIN) ./cmd/historyd

release: ## Static build (CGO_ENABLED=0) of bin/historyd with Go 1.27.3 (RELEASE_TOOLCHAIN): what deploy/Dockerfile ships
	CGO_ENABLED=0 GOTOOLCHAIN=$(RELEASE_TOOLCHAIN) $(MAKE) build

# The storetest case the race detector makes too slow on the durable engines (race_on_test.go in
# internal/store/sqlite and internal/store/postgres): under -race it is skipped, naming this pass,
# which runs it without, on both engines at once.
NO_RACE_CASES = TestConformance/ScopesIsolated$$
NO_RACE_PKGS = ./internal/store/sqlite/ ./internal/store/postgres/

test: ## Unit tests, with the race detector wherever cgo has a C compiler
	@if [ "$$($(GO) env CGO_ENABLED)" = 1 ] && command -v "$$($(GO) env CC)" >/dev/null 2>&1; then \
		echo '$(GO) test -race -count=1 -timeout 20m ./...'; \
		$(GO) test -race -count=1 -timeout 20m ./... || exit 1; \
		echo '$(GO) test -count=1 -timeout 15m -run $(NO_RACE_CASES) $(NO_RACE_PKGS)'; \
		$(GO) test -count=1 -timeout 15m -run '$(NO_RACE_CASES)' $(NO_RACE_PKGS); \
	else \
		echo 'make test: no C compiler for cgo, so running WITHOUT -race (install gcc to get the race detector)'; \
		echo '$(GO) test -count=1 -timeout 20m ./...'; \
		$(GO) test -count=1 -timeout 20m ./...; \
	fi

gen: ## Regenerate gen/ from proto/ with buf and the pinned local plugins
	$(BUF) generate

# The TypeScript client's generator, protoc-gen-es, is pinned in clients/typescript/package-lock.json
# and run by buf as a local plugin from node_modules (ADR-0014).
TS_DIR = clients/typescript
TS_PLUGIN = $(TS_DIR)/node_modules/.bin/protoc-gen-es

gen-clients: gen-python gen-ts ## Regenerate the client libraries' committed stubs (needs the clients' generators)

gen-ts: ## Regenerate clients/typescript/src/gen from proto/ and clients/vendor/ (needs Node.js 20 and npm)
	@command -v npm >/dev/null 2>&1 || { echo 'gen-ts: needs Node.js 20 and npm on PATH'; exit 1; }
	@if [ ! -x $(TS_PLUGIN) ]; then echo 'cd $(TS_DIR) && npm ci'; (cd $(TS_DIR) && npm ci --no-audit --no-fund) || exit 1; fi
	$(BUF) generate --template $(TS_DIR)/buf.gen.yaml

proto-check: ## buf format and lint, buf breaking against the newest v* tag (else HEAD~1), gen/ up to date (and the TypeScript stubs when clients/typescript/node_modules exists)
	$(BUF) format --diff --exit-code
	$(BUF) lint
	@base=$$(git tag --list 'v*' --sort=-v:refname | sed -n 1p); \
	if [ -z "$$base" ]; then base=HEAD~1; fi; \
	if ! git rev-parse --verify --quiet "$$base^{commit}" >/dev/null; then \
		echo "proto-check: buf breaking skipped: baseline $$base is not in this clone (shallow clone?)"; \
	elif ! git cat-file -e "$$base:proto" 2>/dev/null; then \
		echo "proto-check: buf breaking skipped: baseline $$base has no proto/ module"; \
	else \
		echo "proto-check: buf breaking against $$base"; \
		$(BUF) breaking --against ".git#ref=$$base,subdir=proto" || exit 1; \
	fi
	$(BUF) generate
	@git diff --exit-code -- gen/ || { echo 'proto-check: gen/ is stale: run make gen and commit it'; exit 1; }
	@if [ -n "$$(git status --porcelain -- gen/)" ]; then \
		git status --short -- gen/; echo 'proto-check: gen/ has files git does not track: run make gen and commit them'; exit 1; \
	fi
	@if ! command -v protoc >/dev/null 2>&1 || ! command -v grpc_python_plugin >/dev/null 2>&1; then \
		echo 'proto-check: Python stubs not checked: protoc and grpc_python_plugin are not installed (apt-get install protobuf-compiler protobuf-compiler-grpc)'; \
	elif [ "$$(protoc --version)" != '$(PYTHON_STUBS_PROTOC)' ]; then \
		echo "proto-check: Python stubs not checked: they are $(PYTHON_STUBS_PROTOC)'s output, this is $$(protoc --version)"; \
	else \
		tmp=$$(mktemp -d) && OUT="$$tmp" clients/python/gen.sh >/dev/null && \
		diff -r -x __pycache__ "$$tmp/historyd/v1" clients/python/src/historyd/v1 && \
		diff -r -x __pycache__ "$$tmp/historyd/_rpc" clients/python/src/historyd/_rpc; \
		rc=$$?; rm -rf "$$tmp"; \
		if [ $$rc -ne 0 ]; then echo 'proto-check: clients/python stubs are stale: run make gen-python and commit them'; exit 1; fi; \
		echo 'proto-check: clients/python stubs are current'; \
	fi
	@if [ -x $(TS_PLUGIN) ]; then \
		echo '$(BUF) generate --template $(TS_DIR)/buf.gen.yaml'; \
		$(BUF) generate --template $(TS_DIR)/buf.gen.yaml || exit 1; \
		git diff --exit-code -- $(TS_DIR)/src/gen/ || { echo 'proto-check: $(TS_DIR)/src/gen is stale: run make gen-ts and commit it'; exit 1; }; \
		if [ -n "$$(git status --porcelain -- $(TS_DIR)/src/gen/)" ]; then \
			git status --short -- $(TS_DIR)/src/gen/; echo 'proto-check: $(TS_DIR)/src/gen has files git does not track: run make gen-ts and commit them'; exit 1; \
		fi; \
	else \
		echo 'proto-check: TypeScript stubs not checked: $(TS_PLUGIN) is absent (make ts-test, or npm ci in $(TS_DIR), installs it)'; \
	fi

lint: ## go mod tidy -diff (both modules), go vet and staticcheck, including the e2e-tagged code and the test-hook build
	$(GO) mod tidy -diff
	cd tools && $(GO) mod tidy -diff
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/e2e/...
	$(GO) vet -tags historyd_testhook ./internal/server/...
	$(TOOLS) staticcheck ./...
	$(TOOLS) staticcheck -tags e2e ./test/e2e/...
	$(TOOLS) staticcheck -tags historyd_testhook ./internal/server/...

vuln: .vulndb/index/db.json ## govulncheck with Go 1.27.3 (RELEASE_TOOLCHAIN) against the offline database built into .vulndb/
	GOTOOLCHAIN=$(RELEASE_TOOLCHAIN) $(TOOLS) govulncheck -db file://$(CURDIR)/.vulndb ./...

# The offline database: golang.org/x/vulndb's OSV records from the module proxy, indexed by its
# own indexdb command (~1 min cold). Built into .vulndb.new first, so an interrupted build is
# never taken for a database.
.vulndb/index/db.json:
	@dir=$$(cd / && $(GO) mod download -json $(VULNDB_MODULE) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	if [ -z "$$dir" ]; then echo 'vuln: cannot download $(VULNDB_MODULE) from the module proxy'; exit 1; fi; \
	echo "vuln: indexing $$dir/data/osv into .vulndb"; \
	rm -rf .vulndb.new && (cd "$$dir" && $(GO) run ./cmd/indexdb -vulns data/osv -out "$(CURDIR)/.vulndb.new") && \
	rm -rf .vulndb && mv .vulndb.new .vulndb

# e2e, e2e-pg and crash run the tests from inside test/e2e with no package argument (local
# directory mode, each with its -timeout): only in that mode is what a passing test prints passed
# on, and the crash harnesses' lines (issue 15: "crash: N cycles, W acknowledged writes, 0 lost, ...";
# issue 17: "exchange crash: N cycles, S sent, 0 lost, 0 duplicated") and the replicas' lines (issue
# 16: "replicas: 3, W writes, K watchers, 0 gaps, 0 duplicates, 0 lost"; issue 17: "exchange
# replicas: S sent, D delivered once, L dead-lettered, E evicted, 0 lost, 0 duplicated"; issue 18
# appends ", L leased, A acked" and ", K leased, A acked once" to the Exchange's two) must show.
# test/e2e is one package. Its PostgreSQL tests (replicas*_test.go, exchange_replicas_test.go,
# TestReplicasExchangeExample, TestReplicasScalingOutREADME,
# pg_faults*_test.go) use HISTORYD_TEST_POSTGRES_URL or the local server, and skip with a line that
# says how when neither answers; e2e-pg sets HISTORYD_REQUIRE_POSTGRES=1, so they fail instead.
e2e: ## End-to-end tests: build the binary and grpcurl, drive the real process (prints the crash harnesses' lines, and with PostgreSQL the replicas' lines)
	cd test/e2e && $(GO) test -tags e2e -count=1 -timeout 20m

e2e-pg: ## The PostgreSQL end-to-end tests alone (issues 16, 17): 3 replicas on one PostgreSQL, conversation.sh and exchange.sh on each, the Exchange across two replicas checked against its ledger, kill -9 of a replica, the connection cut (needs PostgreSQL)
	cd test/e2e && HISTORYD_REQUIRE_POSTGRES=1 $(GO) test -tags e2e -count=1 -timeout 10m -run '^(TestReplicas.*|TestExchangeReplicas|TestPG.*)$$' -v

crash: ## The kill -9 crash harnesses at 200 cycles: history per --sync mode, the Exchange's ledger (minutes; HISTORYD_CRASH_SEED=S replays their kill schedules and writers' draws): make e2e runs 30
	cd test/e2e && HISTORYD_CRASH_CYCLES=200 $(GO) test -tags e2e -count=1 -timeout 30m -run '^TestCrash(Exchange)?$$' -v

hostile: ## The hostile-client suite at full size, every server under prlimit --as=2147483648 (2 GiB; minutes): not in CI, make e2e runs it scaled down
	HISTORYD_HOSTILE=full HISTORYD_E2E_AS_LIMIT=2147483648 $(GO) test -tags e2e -count=1 -timeout 60m -run 'Hostile' -v ./test/e2e/...

ts-test: build ## TypeScript client (clients/typescript): npm ci, tsc, then node --test against the built binary
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { echo 'ts-test: needs Node.js 20 and npm on PATH'; exit 1; }
	@case "$(BIN)" in /*) bin="$(BIN)" ;; *) bin="$(CURDIR)/$(BIN)" ;; esac; \
	echo "cd $(TS_DIR) && npm ci && npm run build && HISTORYD_BIN=$$bin npm test"; \
	cd $(TS_DIR) && npm ci --no-audit --no-fund && npm run build && HISTORYD_BIN="$$bin" npm test

gen-python: ## Regenerate clients/python's stubs with Debian's protoc and grpc_python_plugin (apt-get install protobuf-compiler protobuf-compiler-grpc)
	clients/python/gen.sh

python-test: build ## Python client tests (clients/python): pytest with Debian's python3 (PYTHON) against the built binary
	@$(PYTHON) -c 'import grpc, google.protobuf, pytest, pytest_asyncio' 2>/dev/null || { \
		echo 'python-test: $(PYTHON) lacks grpc, protobuf, pytest or pytest_asyncio: apt-get install python3-grpcio python3-protobuf python3-pytest python3-pytest-asyncio'; exit 1; }
	@case "$(BIN)" in /*) bin="$(BIN)" ;; *) bin="$(CURDIR)/$(BIN)" ;; esac; \
	echo "cd clients/python && HISTORYD_BIN=$$bin PYTHONPATH=src timeout 600 $(PYTHON) -m pytest"; \
	cd clients/python && HISTORYD_BIN="$$bin" PYTHONPATH=src PYTHONDONTWRITEBYTECODE=1 timeout 600 $(PYTHON) -m pytest

bench: ## Load benchmarks (cmd/historybench): builds and starts historyd, prints the table, writes bench/results.md (~13 min; the sqlite-vs-PostgreSQL row and issue 16's PostgreSQL engine rows need the local PostgreSQL, else they say skipped; -engines postgres runs only the latter)
	$(GO) run ./cmd/historybench -go $(GO) -out bench/results.md

fuzz-smoke: ## Run each fuzz target for 5 seconds (the codecs and converters bring them)
	@found=0; \
	for d in $$($(GO) list -f '{{.Dir}}' ./...); do \
		for f in $$(cat "$$d"/*_test.go 2>/dev/null | sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p'); do \
			found=1; echo "fuzz-smoke: $$f in $$d"; \
			(cd "$$d" && $(GO) test -timeout 5m -run '^$$' -fuzz "^$$f$$" -fuzztime 5s .) || exit 1; \
		done; \
	done; \
	if [ "$$found" = 0 ]; then echo 'fuzz-smoke: no fuzz targets yet'; fi

clean: ## Remove build output (not the .vulndb/ cache)
	rm -rf bin .vulndb.new

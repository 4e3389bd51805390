# Each target bootstraps .venv on first use, so a fresh machine needs only Python 3.11+.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
EXTRAS ?= server,dev,loadtest

.PHONY: serve test lint fmt bench loadtest clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $(STAMP)

serve: $(STAMP)
	$(BIN)/toolref-server serve $(ARGS)

# Everything on one node, then the service and integration suites again on a local
# Redis Cluster (3 primaries, 3 replicas) started from the same valkey-server binary.
test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	TOOLREF_TEST_CLUSTER=1 $(BIN)/python -m pytest tests/service tests/integration $(PYTEST_ARGS)

# Serve (one worker per core), run locust headless for LOADTEST_TIME, judge failures and p95.
LOADTEST_TIME ?= 60s
loadtest: $(STAMP)
	$(BIN)/python -m loadtests.loadrun --time $(LOADTEST_TIME) $(ARGS)

bench: $(STAMP)
	$(BIN)/python -m loadtests.bench

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .toolref .pytest_cache .mypy_cache .ruff_cache

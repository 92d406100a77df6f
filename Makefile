# The two commands: `make up` runs Corral on this machine; `make test` runs every check.
# `make test-fast` is the loop to run while working: the checks without the slow tests.
# Both set up what they need (the virtualenv at .venv) on a fresh machine.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test test-fast lint typecheck contracts pytest venv clean schema chaos config-reference openapi

venv: $(STAMP)

# Each step that can fail on a new machine says which step, why, and what to do.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "make: setup failed: Corral needs Python 3.11 or newer as '$(PYTHON)' (found: $$($(PYTHON) --version 2>&1))"; \
	  echo "  fix: install Python 3.11+ (Debian: apt-get install python3 python3-venv), or make PYTHON=python3.11"; \
	  exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
	  echo "make: setup failed: '$(PYTHON) -m venv' could not create $(VENV)"; \
	  echo "  fix: install Python's venv module (Debian: apt-get install python3-venv), then run make again"; \
	  exit 1; }
	@$(BIN)/python -m pip install --quiet --upgrade pip && \
	  $(BIN)/python -m pip install --quiet -e '.[dev,examples]' || { \
	  echo "make: setup failed: pip could not install Corral's pinned dependencies into $(VENV) (see above)"; \
	  echo "  fix: check that this machine reaches the Python package index (or its mirror: PIP_INDEX_URL), then run make again"; \
	  exit 1; }
	@touch $(STAMP)

up: $(STAMP)
	$(BIN)/python -m corral up

test: lint typecheck contracts pytest

# Every check but the tests that start whole stacks (e2e) or take long for another reason
# (slow): what to run between two edits. `make test` still runs them all.
test-fast: lint typecheck contracts
	$(BIN)/pytest -m "not e2e and not slow"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

contracts: $(STAMP)
	$(BIN)/lint-imports

pytest: $(STAMP)
	$(BIN)/pytest

# A bounded run under seeded crashes (bench/chaos): make chaos CHAOS_ARGS="--jobs 60 --minutes 5 --seed 7"
chaos: $(STAMP)
	$(BIN)/python -m bench.chaos $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) .corral .mypy_cache .pytest_cache .ruff_cache

schema: $(STAMP)
	$(BIN)/python -m tests.schema_snapshot

# docs/configuration.md from the settings classes (tests/docs/test_configuration.py checks it).
config-reference: $(STAMP)
	$(BIN)/python -m tests.config_reference

# docs/api/openapi.json from the API's routes (tests/api/test_openapi_document.py checks it).
openapi: $(STAMP)
	$(BIN)/python -m tests.openapi_snapshot

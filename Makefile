# The two commands: `make up` runs Corral on this machine; `make test` runs every check.
# Both set up what they need (the virtualenv at .venv) on a fresh machine.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: up test lint typecheck contracts pytest venv clean schema

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,examples]'
	touch $(STAMP)

up: $(STAMP)
	$(BIN)/python -m corral up

test: lint typecheck contracts pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

contracts: $(STAMP)
	$(BIN)/lint-imports

pytest: $(STAMP)
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .corral .mypy_cache .pytest_cache .ruff_cache

schema: $(STAMP)
	$(BIN)/python -m tests.schema_snapshot

# joulepool: `make run` sets up and runs the demo; `make test` sets up and runs every test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.joulepool-installed
# CI pins every package with a constraints file; a developer's machine takes the ranges.
CONSTRAINTS ?=

.PHONY: run test lint typecheck conformance bench clean man

# Everything, to run and test it all: the controller with every extra its tests drive, and
# the simulator's own distribution (sim/), both editable.
$(STAMP): pyproject.toml sim/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "joulepool needs Python 3.11 or newer; set PYTHON=python3.11")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]' -e ./sim $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
	touch $(STAMP)

run: $(STAMP)
	rm -rf demo
	$(BIN)/pool demo demo
	$(BIN)/pool ledger verify demo/ledger.cbor

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

conformance: $(STAMP)
	$(BIN)/pool conformance run conformance/vectors

test: lint typecheck conformance
	$(BIN)/pytest

# Manual pages, written from the command line's own parser (`pool man`): built, not kept, so
# they can never disagree with `pool --help`. `man -l docs/man/pool-usage.1` reads one.
man: $(STAMP)
	$(BIN)/pool man --output docs/man

bench: $(STAMP)
	$(BIN)/python benchmarks/decide.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis

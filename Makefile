# Two commands set up everything on a fresh machine: `make bench` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUITE ?= smoke

.PHONY: install install-dev bench test lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Python compiles a module the first time it is imported and keeps the bytecode beside it, so
# the install compiles nothing up front (--no-compile: 84 s against 173 s on 2 cores, most of the
# venv's 6 GB is never imported) and the commands below keep what they compile even where the
# environment sets PYTHONDONTWRITEBYTECODE (with it, every process would compile every module it
# imports again).
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL := $(BIN)/python -m pip install --quiet --no-compile

# The stamp files re-run the install only when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP_INSTALL) -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(PIP_INSTALL) -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

bench: install
	$(BIN)/clusterbench bench $(SUITE)

# Two pytest workers, each taking whole test files (a file's Ray instance starts once).
TEST_WORKERS ?= 2

test: install-dev
	$(BIN)/lint-imports
	WANDB_MODE=disabled $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

lint: install-dev
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) results lightning_logs .pytest_cache

# Two commands set up everything on a fresh machine: `make bench` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUITE ?= smoke

.PHONY: install install-dev bench test lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The stamp files re-run the install only when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
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

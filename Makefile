# The two commands a new user runs (see README):  make demo   and   make test
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: install install-test demo test test-fast lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	# torch is pinned to 2.13.0 (a CPU wheel); never let pip pick a CUDA build
	$(PIP) install -q -e '.[test,embed]'
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

## Ingest the bundled sample logs into an embedded index and explain a span of the sample code.
demo: install
	bash scripts/demo.sh

## Set up and run the whole test suite (unit, golden, CLI, LSP, real Neovim, real VS Code when present),
## one test module per worker, a worker per core (at most 4: pytest-xdist)
XDIST := -n auto --maxprocesses 4 --dist loadfile
test: install-test
	$(VENV)/bin/pytest -q $(XDIST)

## Lint: ruff with the project's configuration (pyproject.toml [tool.ruff]).
lint: install-test
	$(VENV)/bin/ruff check .

test-fast: install-test
	$(VENV)/bin/pytest -q $(XDIST) -m "not e2e and not slow"

bench: install-test
	$(PY) bench/accuracy.py

clean:
	rm -rf .demo .pytest_cache

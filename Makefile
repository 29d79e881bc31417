# The two commands of the README: `make demo` (the main job) and `make test` (the suite); `make docs` serves the site.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test bench docs clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test,docs]"
	touch $@

demo: setup
	$(BIN)/streamcrew demo

# The suite on pytest-xdist workers, twice the cores (2 - 8; tests/xdist_workers.py), the long tests first;
# the cluster tests all run on one (one local cluster). TEST_WORKERS=0 runs it in a single process. The 15 slowest
# tests are listed at the end: what to look at when CI takes long.
TEST_WORKERS ?= $(shell $(PYTHON) tests/xdist_workers.py 2>/dev/null || echo 2)

test: setup
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=15

bench: setup
	$(BIN)/python -m bench.bench_core

docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8008

clean:
	rm -rf $(VENV) *.egg-info

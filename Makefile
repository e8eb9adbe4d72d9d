# Two commands on a machine with only python3: `make demo` and `make test`.
# Both build .venv from uv.lock first (bootstrapping uv with pip when it is missing);
# a second call reuses what is there.

PYTHON ?= python3
VENV   := .venv
UV_VERSION := 0.13.8
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(CURDIR)/$(VENV)
# compiled once at install: this machine runs Python with PYTHONDONTWRITEBYTECODE, so without
# it every process (each server a test starts, each launched run) compiles Dagster anew
export UV_COMPILE_BYTECODE := 1

.PHONY: all setup chromium test test-all demo lint bench chaos dev mutation screenshots clean

all: test

$(VENV)/.synced: pyproject.toml uv.lock
	@if command -v uv >/dev/null 2>&1; then UV=uv; \
	else \
	  [ -x $(VENV)/bin/uv ] || { $(PYTHON) -m venv $(VENV) && \
	    $(VENV)/bin/python -m pip install --quiet "uv==$(UV_VERSION)"; }; \
	  UV=$(VENV)/bin/uv; \
	fi; \
	$$UV sync --frozen --python $(PYTHON) && touch $@

setup: $(VENV)/.synced

# the connect page's browser tests drive Debian's chromium (no browser download): installed
# here only when it is missing and apt-get is there; without it the browser tests fail,
# saying how to install it
chromium:
	@command -v chromium >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; } || \
	  echo "chromium could not be installed (apt-get install -y chromium): browser tests fail"

# what CI runs: unit, integration and one short end-to-end slice (docs/testing.md)
test: setup chromium
	$(VENV)/bin/pytest -n 2 --dist loadscope -m "not slow"

# everything, the chaos seed, the bench smoke and the slowest end-to-end cases too: run it
# before an issue is called resolved
test-all: setup chromium
	$(VENV)/bin/pytest -n 2 --dist loadscope

demo: setup
	$(VENV)/bin/ledgerlake demo

# ledgerlake against dlt (installed for the bench only, with uv) and the raw-fetch floor;
# about 15 minutes; writes bench/results/latest.json and the table in bench/README.md
bench: setup
	$(VENV)/bin/python bench/run.py $(BENCH_ARGS)

# exactly once under faults: 10 seeds of tests/chaos/run.py (both environments, a few hundred
# records, processes SIGKILLed, the sandbox's faults), each checked against the sandbox's
# ground truth; writes tests/chaos/results.json and the table in docs/operations.md. About
# 25 minutes a seed on 2 cores (about 4 hours). `make test-all` runs one short
# seed (tests/e2e/test_chaos.py).
chaos: setup
	$(VENV)/bin/python tests/chaos/run.py --seeds 10 --records 300 --window 240 --docs $(CHAOS_ARGS)

# mutmut on resources/inbox/store.py, resources/client/sdk.py, assets/checks.py, assets/transactions.py,
# each with its own tests (mutation/run.py); not part of `make test`. MODULES=... picks some.
# Figures and how long it takes: docs/testing.md; the equivalent mutants it leaves out of
# the score: mutation/equivalents.toml
# the README's pictures of the Dagster UI, taken over `ledgerlake dev` by its browser test
screenshots: setup chromium
	LEDGERLAKE_SCREENSHOTS=docs $(VENV)/bin/pytest -p no:cacheprovider tests/e2e/test_dev_ui.py

mutation: setup
	$(VENV)/bin/python mutation/run.py $(MODULES)

lint: setup
	$(VENV)/bin/ruff check .

# the generated pages: docs/cli.md from the command line's parser, docs/columns.md from the
# column declarations (resources/tables.py); a test fails when either is stale
.PHONY: docs
docs: setup
	$(VENV)/bin/python -m pipeline.cli.reference
	$(VENV)/bin/python -m assets.warehouse

dev: setup
	$(VENV)/bin/ledgerlake dev

clean:
	rm -rf $(VENV) data .pytest_cache .ruff_cache .mutation mutants

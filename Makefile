# The README's two commands: `make demo` and `make test`. Each creates .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_DEMO := $(VENV)/.installed-demo
STAMP_TEST := $(VENV)/.installed-test

.PHONY: demo test check install-demo install-test install-outside warm-tests clean

UV := $(BIN)/uv

# uv (from PyPI, into the venv) resolves, installs and compiles the packages on every core: about 16 s on a
# fresh clone where pip took 36 s (pip install 26 s, then compileall 10 s). The venv gets no pip of its own
# (ensurepip takes about 9 s): python3's pip installs uv into it (`pip --python`, pip >= 22.3), or, where
# python3 has no pip, the venv's own pip after all.
$(UV):
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python install --quiet uv 2> /dev/null || \
	    { $(BIN)/python -m ensurepip --default-pip > /dev/null && $(BIN)/python -m pip install --quiet uv; }

$(STAMP_DEMO): $(UV) pyproject.toml
	$(UV) pip install --quiet --python $(BIN)/python --compile-bytecode -e '.[demo]'
	touch $@

$(STAMP_TEST): $(UV) pyproject.toml
	$(UV) pip install --quiet --python $(BIN)/python --compile-bytecode -e '.[test,demo]'
	touch $@

install-demo: $(STAMP_DEMO)
install-test: $(STAMP_TEST)

# What the tests need from outside PyPI, installed when missing: promtool and prometheus (Debian's
# package) check the shipped rules and dashboard against a real Prometheus; the pinned npm clients in
# tests/interop (TypeScript SDK v1/v2, MCP Inspector CLI, Claude Code, Codex) drive the interop tests;
# redis-server backs the replicated gateway tests.
install-outside:
	sh scripts/install-debian-package.sh prometheus prometheus promtool
	sh scripts/install-debian-package.sh redis-server redis-server
	sh scripts/install-node-deps.sh

demo: $(STAMP_DEMO)
	$(BIN)/orchestrator --config bernstein.yaml demo

# Static checks, the same ones `make test` runs first: ruff (lint and format) and mypy over src/.
check: $(STAMP_TEST)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

# Compiled once before the test run, because where PYTHONDONTWRITEBYTECODE is set nothing keeps bytecode:
# the project's modules (every gateway, CLI and test server the tests start would compile them again) and
# the test modules as pytest rewrites their asserts (each pytest worker would rewrite them all again: about
# 10 s of CPU per worker, 5 s with the rewritten modules kept).
warm-tests: $(STAMP_TEST)
	$(BIN)/python -m compileall -q -x node_modules src tests > /dev/null
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest --collect-only -q -p no:cacheprovider > /dev/null

# The static checks and the warm-up run while the outside parts install (mostly downloads). Then test
# files run in parallel, each whole on one worker (its module fixtures, servers and gateways stay
# together), one worker more than there are cores: a worker waiting on a process it started, or on a
# timeout, leaves its core to the others (on 2 cores, 3 workers ran the tests in 268-270 s and 2 workers
# in 294-307 s, for the same CPU).
WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))

test:
	$(MAKE) --no-print-directory --output-sync -j3 check install-outside warm-tests
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadfile

clean:
	rm -rf $(VENV) .pytest_cache

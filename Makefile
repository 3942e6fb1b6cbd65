# The README's two commands: `make demo` and `make test`. Each creates .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_DEMO := $(VENV)/.installed-demo
STAMP_TEST := $(VENV)/.installed-test

.PHONY: demo test check install-demo install-test install-outside clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_DEMO): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[demo]'
	touch $@

# pip compiles each installed file in turn; compileall does it on every core (about 15 s sooner on a fresh
# clone). Like pip, it leaves a file that does not compile to fail on import, if anything imports it.
$(STAMP_TEST): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --no-compile -e '.[test,demo]'
	-$(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null
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

# The static checks run while the outside parts install (mostly downloads). Then test files run in
# parallel, each whole on one worker (its module fixtures, servers and gateways stay together), a worker
# per core: the tests and the processes they start keep two cores busy (four workers on two cores took as
# long and 10 % more CPU).
# The project's own modules are compiled first too: where PYTHONDONTWRITEBYTECODE is set, every gateway,
# CLI and test server the tests start would compile them again.
test:
	$(MAKE) --no-print-directory --output-sync -j2 check install-outside
	$(BIN)/python -m compileall -q -x node_modules src tests > /dev/null
	$(BIN)/python -m pytest -n auto --maxprocesses 4 --dist loadfile

clean:
	rm -rf $(VENV) .pytest_cache

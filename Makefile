# The README's two commands: `make demo` and `make test`. Each creates .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_DEMO := $(VENV)/.installed-demo
STAMP_TEST := $(VENV)/.installed-test

.PHONY: demo test install-demo install-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_DEMO): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[demo]'
	touch $@

$(STAMP_TEST): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,demo,semantic]'
	touch $@

install-demo: $(STAMP_DEMO)
install-test: $(STAMP_TEST)

demo: $(STAMP_DEMO)
	$(BIN)/orchestrator --config bernstein.yaml demo

# promtool and prometheus (Debian's package, installed when missing) check the shipped rules and
# dashboard (tests/test_prometheus_rules.py, tests/test_prometheus_scrape.py); the pinned npm clients in
# tests/interop (TypeScript SDK v1/v2, MCP Inspector CLI, Claude Code, Codex) drive the interop tests.
test: $(STAMP_TEST)
	sh scripts/install-prometheus.sh
	sh scripts/install-node-deps.sh
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache

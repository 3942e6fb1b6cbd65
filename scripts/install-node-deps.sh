#!/bin/sh
# Installs the pinned npm packages of tests/interop/ (package-lock.json) with `npm ci`.
#
# `make test` runs this before pytest: tests/test_interop_clients.py drives the official TypeScript SDK
# clients (v1 and v2) and the MCP Inspector CLI against `orchestrator serve`, and tests/test_agent_clis.py
# runs Claude Code and Codex against a scripted model endpoint on 127.0.0.1.
# Quick and silent when node_modules already matches the lock: the lock's sha256 is kept in a stamp file
# inside node_modules (which `npm ci` recreates, so a half-finished install leaves no stamp).
# About 830 MB installed (the Claude Code and Codex native binaries are most of it), 20-40 s from the registry.
set -eu

ROOT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
DIR="$ROOT/tests/interop"
LOCK="$DIR/package-lock.json"
STAMP="$DIR/node_modules/.installed-lock-sha256"

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "install-node-deps: node and npm are needed for tests/interop (Node >= 20; Debian: apt-get install nodejs npm)" >&2
    exit 1
fi

if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
    echo "install-node-deps: Node $(node --version) is too old for tests/interop (@modelcontextprotocol/client needs Node >= 20)" >&2
    exit 1
fi

WANT=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
    exit 0
fi

echo "install-node-deps: installing tests/interop npm packages (npm ci)" >&2
# --loglevel=error: Claude Code's wrapper declares node >= 22, but what runs is its native binary, which
# does not use the installed Node, so npm's engine warning on Node 20 is noise here.
(cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
printf '%s\n' "$WANT" >"$STAMP"

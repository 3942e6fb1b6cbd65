#!/bin/sh
# Usage: install-debian-package.sh PACKAGE COMMAND...
# Installs Debian's PACKAGE (apt-get, --no-install-recommends) when any COMMAND is missing from PATH.
#
# `make install-outside` (part of `make test`) runs it for what the tests need outside PyPI:
#   prometheus (prometheus, promtool): tests/test_prometheus_rules.py runs `promtool check/test rules` over
#     deploy/prometheus/, and tests/test_prometheus_scrape.py starts a real `prometheus`;
#   redis-server (redis-server): tests/test_gateway_replicas.py starts its own Redis (>= 7) and runs two
#     gateways that share it as their store.
# Silent and quick when every command is on PATH. Needs apt-get and root (or sudo). On a host with systemd
# these packages enable their own services (:9090, :6379); the tests start their own on free ports.
# --no-install-recommends: recommended extras (prometheus' node exporter) are daemons the tests do not need.
set -eu

if [ "$#" -lt 2 ]; then
    echo "install-debian-package: usage: install-debian-package.sh PACKAGE COMMAND..." >&2
    exit 2
fi
PACKAGE=$1
shift

missing=""
for command in "$@"; do
    command -v "$command" >/dev/null 2>&1 || missing="$missing $command"
done
if [ -z "$missing" ]; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-debian-package: not on PATH:$missing, and apt-get is missing; install $PACKAGE so they are" >&2
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "install-debian-package: installing Debian's $PACKAGE package needs root or sudo" >&2
    exit 1
fi

echo "install-debian-package: not on PATH:$missing; installing Debian's $PACKAGE package" >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$PACKAGE" >/dev/null

for command in "$@"; do
    if ! command -v "$command" >/dev/null 2>&1; then
        echo "install-debian-package: the $PACKAGE package installed but $command is not on PATH" >&2
        exit 1
    fi
done

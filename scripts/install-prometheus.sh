#!/bin/sh
# Installs Debian's `prometheus` package (prometheus + promtool) when either command is missing.
#
# `make test` runs this before pytest: tests/test_prometheus_rules.py runs `promtool check/test rules`
# over deploy/prometheus/, and tests/test_prometheus_scrape.py starts a real `prometheus`.
# Silent and quick when both are already on PATH. Needs apt-get and root (or sudo).
# --no-install-recommends: the recommended node exporter is a daemon the tests do not need.
# On a host with systemd the package enables its own prometheus.service on :9090; the tests start
# their own prometheus on a free port, so the two do not collide.
set -eu

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-prometheus: promtool/prometheus not found and apt-get is missing; install Prometheus (>= 2.42) so promtool and prometheus are on PATH" >&2
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "install-prometheus: installing Debian's prometheus package needs root or sudo" >&2
    exit 1
fi

echo "install-prometheus: promtool/prometheus missing; installing Debian's prometheus package" >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null

for tool in promtool prometheus; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "install-prometheus: the prometheus package installed but $tool is not on PATH" >&2
        exit 1
    fi
done

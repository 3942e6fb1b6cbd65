#!/bin/sh
# Installs Debian's `redis-server` package when the command is missing.
#
# `make test` runs this before pytest: tests/test_gateway_replicas.py starts its own redis-server (a free
# port, a temporary folder, no persistence) and runs two gateways that share it as their store.
# Silent and quick when redis-server is already on PATH. Needs apt-get and root (or sudo).
# On a host with systemd the package enables its own redis-server.service on :6379; the tests start their
# own on a free port, so the two do not collide.
set -eu

if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-redis: redis-server not found and apt-get is missing; install Redis (>= 7) so redis-server is on PATH" >&2
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "install-redis: installing Debian's redis-server package needs root or sudo" >&2
    exit 1
fi

echo "install-redis: redis-server missing; installing Debian's redis-server package" >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null

if ! command -v redis-server >/dev/null 2>&1; then
    echo "install-redis: the redis-server package installed but redis-server is not on PATH" >&2
    exit 1
fi

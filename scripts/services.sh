#!/usr/bin/env bash
# The programs the tests start as services of their own: redis-server (StoreStorage's tests
# start one on a free loopback port and stop it). Installed with apt-get where missing.
# Idempotent: installs nothing when everything is there.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
    echo "[services] installing redis-server"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq redis-server >/dev/null
    # Debian's package starts a system server on 6379; the tests start their own
    if command -v systemctl >/dev/null 2>&1; then
        systemctl disable --now redis-server >/dev/null 2>&1 || true
    fi
else
    echo "[services] redis-server is missing and cannot be installed here (needs root and" \
        "apt-get): the StoreStorage tests will fail" >&2
fi

#!/usr/bin/env bash
# Set everything up, then run the whole test suite. Extra arguments go to pytest.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash scripts/setup.sh
bash scripts/services.sh

set +e
"$ROOT/.venv/bin/python" -m pytest "$@"
rc=$?
set -e

if [ "$rc" -eq 5 ]; then
    echo "[test] pytest collected no tests: failing (exit 1)" >&2
    exit 1
fi
exit "$rc"

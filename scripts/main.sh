#!/usr/bin/env bash
# Set everything up, then run the main job: the offline-to-online example
# (falls back to the quickstart while that example does not exist).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash scripts/setup.sh

if [ -f examples/offline_to_online.py ]; then
    exec "$ROOT/.venv/bin/python" examples/offline_to_online.py "$@"
elif [ -f examples/quickstart.py ]; then
    exec "$ROOT/.venv/bin/python" examples/quickstart.py "$@"
else
    echo "[main] neither examples/offline_to_online.py nor examples/quickstart.py exists" >&2
    exit 1
fi

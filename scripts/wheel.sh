#!/usr/bin/env bash
# The published package, checked as a user gets it: build the wheel, check what is in it
# (scripts/check_wheel.py), install it in a clean virtualenv (pinned CPU torch, no
# checkout on the path) and run the quickstart example from there.
#   RBDATA_WHEEL_VENV  where to put the clean virtualenv (default: a temporary directory)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh >/dev/null

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
VENV="${RBDATA_WHEEL_VENV:-$WORK/venv}"
export PIP_DISABLE_PIP_VERSION_CHECK=1

echo "[wheel] building"
"$ROOT/.venv/bin/python" -m pip wheel --quiet --no-deps --no-build-isolation -w "$WORK/dist" "$ROOT"
WHEEL="$(ls "$WORK"/dist/rbdata-*.whl)"
"$ROOT/.venv/bin/python" scripts/check_wheel.py "$WHEEL"

echo "[wheel] installing $(basename "$WHEEL") in a clean virtualenv"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet -c constraints.txt torch==2.13.0
"$VENV/bin/python" -m pip install --quiet -c constraints.txt "$WHEEL"

echo "[wheel] running the quickstart from the installed wheel"
cp examples/quickstart.py "$WORK/quickstart.py"
(cd "$WORK" && "$VENV/bin/python" -c "import rbdata, sys; assert '$ROOT' not in rbdata.__file__, rbdata.__file__; print('[wheel] rbdata from', rbdata.__file__)" \
    && "$VENV/bin/python" quickstart.py && "$VENV/bin/rbdata" --version)
echo "[wheel] ok"

#!/usr/bin/env bash
# Create (or reuse) .venv and install rbdata in editable mode with the extras asked for:
#   bash scripts/setup.sh                  # rbdata[dev]: everything, for the tests (scripts/test.sh)
#   bash scripts/setup.sh examples,hdf5    # only what the main job needs (scripts/main.sh)
# Extras are installed additively into the one .venv, each set with its own stamp, so the
# tests still get the dev extras after the main job set the venv up (and the reverse).
# Idempotent: a second run with the same extras reuses the venv and installs nothing new.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
EXTRAS="${1:-dev}"
case "$EXTRAS" in
    *[!a-z0-9,_-]*) echo "[setup] extras must look like 'dev' or 'examples,hdf5', got '$EXTRAS'" >&2; exit 2 ;;
esac

if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi

PIP=("$VENV/bin/python" -m pip)
export PIP_DISABLE_PIP_VERSION_CHECK=1

# Fast path: nothing that decides what gets installed changed since the last
# successful run with these extras, and the editable install is still there (an
# editable install picks up source changes by itself). RBDATA_FORCE_SETUP=1 skips it.
STAMP="$VENV/.rbdata-setup-stamp-${EXTRAS//,/+}"
# The editable install must resolve `rbdata` to the regular package
# (rbdata/__init__.py), not to a namespace package, from outside the repo.
CHECK="import importlib.util as u, sys; s = u.find_spec('rbdata'); sys.exit(not (s and (s.origin or '').endswith('__init__.py')))"
WANT="$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ "${RBDATA_FORCE_SETUP:-0}" != "1" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] \
    && (cd / && "$VENV/bin/python" -c "$CHECK") 2>/dev/null; then
    echo "[setup] up to date ($VENV, rbdata[$EXTRAS])"
    exit 0
fi
rm -f "$STAMP"

"${PIP[@]}" install --quiet --upgrade pip
# torch first, pinned: an unpinned torch (asked for by any dependency) would be a
# multi-GB CUDA build.
"${PIP[@]}" install --quiet -c constraints.txt torch==2.13.0
"${PIP[@]}" install --quiet -c constraints.txt -e ".[$EXTRAS]"
# Stamp only once the package itself resolves from outside the repo (it doesn't
# while rbdata/__init__.py is missing), so the next run retries the install.
if (cd / && "$VENV/bin/python" -c "$CHECK"); then
    echo "$WANT" > "$STAMP"
else
    echo "[setup] warning: rbdata is not importable from the venv (is rbdata/__init__.py there?)" >&2
fi

echo "[setup] ready (rbdata[$EXTRAS]): $("$VENV/bin/python" -c 'import sys, torch; print(f"python {sys.version.split()[0]}, torch {torch.__version__}")')"

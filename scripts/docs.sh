#!/usr/bin/env bash
# Build the documentation site (docs/ -> docs/_build/html) with warnings as errors.
# Sets up .venv as scripts/test.sh does and installs the 'docs' extra there (pinned by
# constraints.txt) when its requirements are not all met; PYTHON names another interpreter
# instead, which must have the 'docs' extra already. Runs the pages' code examples (Sphinx's
# doctest builder, on a fresh environment), then builds the HTML. Extra arguments go to
# both sphinx-build runs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Exits non-zero unless every requirement of the 'docs' extra in pyproject.toml (on Python
# 3.10, which has no tomllib: of the installed rbdata) is installed at a version it allows.
HAS_DOCS_EXTRA='
import sys
from importlib.metadata import PackageNotFoundError, requires, version
from packaging.requirements import Requirement
try:
    import tomllib
    with open("pyproject.toml", "rb") as file:
        wanted = tomllib.load(file)["project"]["optional-dependencies"]["docs"]
except ModuleNotFoundError:
    wanted = requires("rbdata") or []
for text in wanted:
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": "docs"}):
        continue
    try:
        installed = version(req.name)
    except PackageNotFoundError:
        sys.exit(f"{req.name} is not installed")
    if not req.specifier.contains(installed, prereleases=True):
        sys.exit(f"{req.name} {installed} does not satisfy {req}")
'

if [ -z "${PYTHON:-}" ]; then
    bash scripts/setup.sh
    PYTHON="$ROOT/.venv/bin/python"
    if ! "$PYTHON" -c "$HAS_DOCS_EXTRA" 2>/dev/null; then
        echo "[docs] installing rbdata[docs] into .venv"
        PIP_DISABLE_PIP_VERSION_CHECK=1 "$PYTHON" -m pip install --quiet -c constraints.txt -e '.[docs]'
    fi
elif ! "$PYTHON" -c "$HAS_DOCS_EXTRA"; then
    echo "[docs] $PYTHON lacks the 'docs' extra: pip install -c constraints.txt -e '.[docs]'" >&2
    exit 2
fi
OUT="$ROOT/docs/_build"

"$PYTHON" -m sphinx -b doctest -E -W --keep-going -q -d "$OUT/doctrees" docs "$OUT/doctest" "$@"
"$PYTHON" -m sphinx -b html -W --keep-going -q -d "$OUT/doctrees" docs "$OUT/html" "$@"
echo "[docs] built $OUT/html/index.html"

#!/usr/bin/env bash
# Build the documentation site (docs/ -> docs/_build/html) with warnings as errors.
# Sets up .venv as scripts/test.sh does (unless PYTHON names an interpreter that has the
# 'docs' extra), runs the pages' code examples (Sphinx's doctest builder, on a fresh
# environment), then builds the HTML. Extra arguments go to both sphinx-build runs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [ -z "${PYTHON:-}" ]; then
    bash scripts/setup.sh
    PYTHON="$ROOT/.venv/bin/python"
fi
OUT="$ROOT/docs/_build"

"$PYTHON" -m sphinx -b doctest -E -W --keep-going -q -d "$OUT/doctrees" docs "$OUT/doctest" "$@"
"$PYTHON" -m sphinx -b html -W --keep-going -q -d "$OUT/doctrees" docs "$OUT/html" "$@"
echo "[docs] built $OUT/html/index.html"

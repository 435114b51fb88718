#!/usr/bin/env bash
# Lint and type checks: ruff check, ruff format --check, and mypy (strict over rbdata/, as
# configured in pyproject.toml). Run from anywhere; PYTHON overrides the interpreter
# (default: the project's .venv, as scripts/setup.sh makes it).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-$ROOT/.venv/bin/python}"

echo "[lint] ruff check"
"$PY" -m ruff check .
echo "[lint] ruff format --check"
"$PY" -m ruff format --check .
echo "[lint] mypy"
"$PY" -m mypy

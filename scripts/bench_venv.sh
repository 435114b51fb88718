#!/usr/bin/env bash
# Create (or reuse) the benchmark-only virtualenv holding the reference library
# (torchrl), kept OUTSIDE the repo so rbdata's own environment never sees torchrl.
#   RBDATA_TORCHRL_VENV  where to put it (default: ../bench-venvs/torchrl from the repo root)
# Everything here is installed with torch pinned to 2.13.0 (constraints.txt):
# an unpinned torch would be a multi-GB CUDA build.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
VENV="${RBDATA_TORCHRL_VENV:-$ROOT/../bench-venvs/torchrl}"
mkdir -p "$(dirname "$VENV")"
VENV="$(cd "$(dirname "$VENV")" && pwd)/$(basename "$VENV")"

if [ ! -x "$VENV/bin/python" ]; then
    echo "[bench-venv] creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi

PIP=("$VENV/bin/python" -m pip)
C=(-c "$ROOT/constraints.txt")
export PIP_DISABLE_PIP_VERSION_CHECK=1

"${PIP[@]}" install --quiet --upgrade pip
"${PIP[@]}" install --quiet "${C[@]}" torch==2.13.0
"${PIP[@]}" install --quiet "${C[@]}" torchrl==0.14.1 'tensordict>=0.14,<0.15' numpy
# cpprb (compiled sum tree) is an optional second reference: don't fail without it.
if ! "${PIP[@]}" install --quiet "${C[@]}" cpprb; then
    echo "[bench-venv] cpprb could not be installed; benchmarks will skip it" >&2
fi

"$VENV/bin/python" -c "import torch, tensordict, torchrl; from torchrl.data import ReplayBuffer, LazyTensorStorage, PrioritizedSampler, SliceSampler; print(f'[bench-venv] ready in $VENV: torch {torch.__version__}, tensordict {tensordict.__version__}, torchrl {torchrl.__version__}')"
# torchrl's PrioritizedSampler needs its compiled sum tree (torchrl._torchrl), built
# against an older torch; report whether it loads (benchmarks skip it when not).
if "$VENV/bin/python" -c "from torchrl.data import PrioritizedSampler; PrioritizedSampler(8, 0.7, 0.9)" >/dev/null 2>&1; then
    echo "[bench-venv] torchrl PrioritizedSampler: ok"
else
    echo "[bench-venv] torchrl PrioritizedSampler: unavailable (torchrl's C++ sum tree does not load against this torch)"
fi

#!/usr/bin/env bash
# Differential harness: run tests/compat (rbdata against torchrl 0.14.1, both imported
# in one process) in the torchrl virtualenv.
#   RBDATA_TORCHRL_VENV  the torchrl venv to build/reuse (default ../bench-venvs/torchrl,
#                        built by scripts/bench_venv.sh with torch pinned by constraints.txt)
#   RBDATA_COMPAT_VENV   use this existing venv instead, as it is (e.g. one with torch 2.14
#                        where torchrl's compiled sum tree loads); its torch is kept
# Extra arguments go to pytest.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# torchrl's example scripts (tests/compat/test_torchrl_examples.py) are read from a pytorch/rl
# git mirror, never vendored: the one the search tool's `fetch` lays out, when it is there.
if [ -z "${RBDATA_TORCHRL_MIRROR:-}" ] && [ -d /work/.mirror/pytorch+rl/repo ]; then
    export RBDATA_TORCHRL_MIRROR=/work/.mirror/pytorch+rl/repo
fi

if [ -n "${RBDATA_COMPAT_VENV:-}" ]; then
    VENV="$RBDATA_COMPAT_VENV"
else
    bash scripts/bench_venv.sh
    VENV="${RBDATA_TORCHRL_VENV:-$ROOT/../bench-venvs/torchrl}"
fi
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
    echo "[compat] no python in $VENV" >&2
    exit 1
fi

# Pin torch to the version this venv already has (constraints.txt's 2.13.0 for the
# default venv), so nothing installed here can replace it.
PINS="$(mktemp)"
trap 'rm -f "$PINS"' EXIT
cat constraints.txt > "$PINS"
TORCH="$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')"
sed -i '/^torch==/d' "$PINS"
echo "torch==$TORCH" >> "$PINS"

# rbdata's runtime dependencies (from pyproject.toml) plus the test tools; rbdata
# itself is imported from this checkout (PYTHONPATH), never installed here.
mapfile -t DEPS < <("$PY" - <<'EOF'
import tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
for dep in project["dependencies"]:
    print(dep)
for dep in project["optional-dependencies"]["dev"]:
    if dep.split("[")[0].split(">")[0].split("=")[0].strip() in ("pytest", "hypothesis"):
        print(dep)
EOF
)
# gymnasium and h5py: what torchrl's examples/replay-buffers scripts need to run
# (tests/compat/test_torchrl_examples.py runs them on both libraries).
DEPS+=(gymnasium h5py)
"$PY" -m pip install --quiet -c "$PINS" "${DEPS[@]}"

"$PY" -c "import torch, tensordict, torchrl; print(f'[compat] torch {torch.__version__}, tensordict {tensordict.__version__}, torchrl {torchrl.__version__}')"

set +e
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -p no:cacheprovider tests/compat "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "[compat] pytest collected no tests: failing (exit 1)" >&2
    exit 1
fi
exit "$rc"

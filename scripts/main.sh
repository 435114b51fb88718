#!/usr/bin/env bash
# Set up what the main job needs (rbdata with its `examples` and `hdf5` extras: gymnasium,
# matplotlib, h5py; not the dev tools), then run it: the offline-to-online example.
# Its outputs (learning curve CSV/PNG, Lightning logs) go to runs/offline_to_online/,
# which .gitignore covers. Extra arguments go to the example (e.g. --quick).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash scripts/setup.sh examples,hdf5

exec "$ROOT/.venv/bin/python" examples/offline_to_online.py "$@"

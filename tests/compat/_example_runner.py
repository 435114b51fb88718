"""Run one of torchrl's example scripts, as is, with torchrl's buffer names or rbdata's.

Usage (in torchrl's virtualenv, rbdata importable)::

    python tests/compat/_example_runner.py {torchrl,rbdata} SCRIPT [SEED]

With ``rbdata``, the replay-buffer names of ``torchrl.data`` and
``torchrl.data.replay_buffers`` (buffers, storages, samplers, writers: the
names both libraries have, :data:`NAMES`) are pointed at rbdata's classes
before the script runs; everything else (environments, collectors, modules,
env transforms) is torchrl's own. The global generators are seeded the same
way for both runs. The script runs in this process, as ``__main__``; its
exit status is the runner's.
"""

from __future__ import annotations

import random
import runpy
import sys

#: torchrl's buffer names that rbdata provides (what is pointed at rbdata's classes)
NAMES = (
    "ReplayBuffer",
    "TensorDictReplayBuffer",
    "PrioritizedReplayBuffer",
    "TensorDictPrioritizedReplayBuffer",
    "ListStorage",
    "LazyStackStorage",
    "TensorStorage",
    "LazyTensorStorage",
    "LazyMemmapStorage",
    "CompressedListStorage",
    "Storage",
    "Sampler",
    "RandomSampler",
    "SamplerWithoutReplacement",
    "PrioritizedSampler",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "PrioritizedSliceSampler",
    "Writer",
    "RoundRobinWriter",
    "TensorDictRoundRobinWriter",
    "TensorDictMaxValueWriter",
    "ImmutableDatasetWriter",
    "ReplayBufferEnsemble",
    "StorageEnsemble",
    "SamplerEnsemble",
    "WriterEnsemble",
    "StorageCheckpointerBase",
    "ListStorageCheckpointer",
    "TensorStorageCheckpointer",
    "CompressedListStorageCheckpointer",
    "FlatStorageCheckpointer",
    "NestedStorageCheckpointer",
    "H5StorageCheckpointer",
    "StorageEnsembleCheckpointer",
    "TED2Flat",
    "Flat2TED",
    "TED2Nested",
    "Nested2TED",
    "H5Split",
    "H5Combine",
    "HERReplayBuffer",
    "HindsightStrategy",
)

_MODULES = ("torchrl.data", "torchrl.data.replay_buffers")


def point_at_rbdata() -> list[str]:
    """Point torchrl's buffer names at rbdata's classes; the names replaced."""
    import importlib

    import rbdata

    replaced = []
    for module_name in _MODULES:
        module = importlib.import_module(module_name)
        for name in NAMES:
            if hasattr(module, name):
                setattr(module, name, getattr(rbdata, name))
                replaced.append(f"{module_name}.{name}")
    return replaced


def main(argv: list[str]) -> None:
    lib, script = argv[0], argv[1]
    seed = int(argv[2]) if len(argv) > 2 else 0
    import numpy as np
    import torch
    import torchrl.data  # noqa: F401 - torchrl itself, imported for everything else

    if lib == "rbdata":
        point_at_rbdata()
    elif lib != "torchrl":
        raise SystemExit(f"lib must be torchrl or rbdata, got {lib!r}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    sys.argv = [script]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])

"""The two libraries under comparison, each behind one namespace of the same names."""

from __future__ import annotations

import functools
import importlib
import types
from typing import Any

import pytest

LIBS = ("torchrl", "rbdata")

#: the public names compared (the 32 core names of issue 10, plus Sampler)
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
    "SampleUnit",
    "Transition",
    "Sequence",
    "traj",
    "Trajectory",
    "ConditionalUpdateResult",
    "Transform",
    "Compose",
    "PolicyAgeFilter",
    "OfflineToOnlineReplayBuffer",
    # issue 36: the rest of torchrl.data.replay_buffers (parity-b's part)
    "ConsumingSampler",
    "StalenessAwareSampler",
    "StreamingSliceSampler",
    "PromptGroupSampler",
    "StoreStorage",
    "RayReplayBuffer",
    "RemoteTensorDictReplayBuffer",
    "DEFAULT_DONE_KEYS",
    "prefill_replay_buffer",
)

_TORCHRL_MODULES = (
    "torchrl.data",
    "torchrl.data.replay_buffers",
    "torchrl.envs.transforms",
    "torchrl.data.replay_buffers.samplers",
)


@functools.cache
def load(name: str) -> types.SimpleNamespace:
    """The namespace of ``name`` ("torchrl" or "rbdata"): every name of NAMES (None if absent)."""
    modules = (
        [importlib.import_module(m) for m in _TORCHRL_MODULES]
        if name == "torchrl"
        else [importlib.import_module("rbdata")]
    )
    found = {}
    for attr in NAMES:
        found[attr] = next((getattr(m, attr) for m in modules if hasattr(m, attr)), None)
    return types.SimpleNamespace(name=name, **found)


@functools.cache
def torchrl_prioritized_available() -> bool:
    """Whether torchrl's PrioritizedSampler (its compiled sum tree) works in this venv."""
    try:
        load("torchrl").PrioritizedSampler(8, 0.7, 0.9)
    except Exception:  # noqa: BLE001 - any failure of the extension means unavailable
        return False
    return True


def cursor(writer: object) -> int:
    """The writer's cursor: torchrl keeps it in ``_cursor``, rbdata exposes ``cursor``."""
    value = writer.cursor if hasattr(writer, "cursor") else writer._cursor
    return int(value)


def parity_gap(request: Any, ns: Any, reason: str) -> None:
    """Mark the running test as a known parity gap when it runs against rbdata."""
    if ns.name == "rbdata":
        request.applymarker(pytest.mark.xfail(strict=True, reason="parity gap: " + reason))

"""rbdata: a fast replay buffer for PyTorch with torchrl's ReplayBuffer API.

Everything public is importable as ``from rbdata import X``. Names that need
an optional extra (Lightning, HDF5, Minari) are loaded on first use and raise an
ImportError naming the extra when it is missing.
"""

from __future__ import annotations

import importlib
from typing import Any

import rbdata.service  # registers service_backend="ray" (Ray itself is imported on use)
from rbdata._start_method import default_to_spawn
from rbdata.buffers import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from rbdata.buffers._conditional_update import ConditionalUpdateResult
from rbdata.errors import (
    CheckpointError,
    RateLimitTimeoutError,
    ServiceUnavailableError,
    SharedMemoryFull,
)
from rbdata.policy_version import PolicyVersion
from rbdata.query import TrajectoryPredicate, filter_trajectories, iter_trajectories, traj
from rbdata.sample_units import SampleUnit, Sequence, Transition
from rbdata.samplers import (
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)
from rbdata.samplers.schedulers import (
    LambdaScheduler,
    LinearScheduler,
    ParameterScheduler,
    SchedulerList,
    StepScheduler,
)
from rbdata.storages import (
    CompressedListStorage,
    FrameDedupStorage,
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    Storage,
    TensorStorage,
)
from rbdata.trajectories import Trajectory, find_start_stop_traj
from rbdata.transforms import Compose, PolicyAgeFilter, Transform
from rbdata.writers import (
    ImmutableDatasetWriter,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictRoundRobinWriter,
    Writer,
)

default_to_spawn()  # as torchrl: "spawn" unless the program chose a start method

__version__ = "0.1.0"

# name -> (module, extra needed)
_LAZY: dict[str, tuple[str, str | None]] = {
    "ReplayDataset": ("rbdata.loader", None),
    "SampleToInsertRatio": ("rbdata.loader", None),
    "ReplayDataModule": ("rbdata.lightning", "lightning"),
    "ReplayCallback": ("rbdata.lightning", "lightning"),
    "load_offline_data": ("rbdata.datasets", None),
    "load_d4rl_hdf5": ("rbdata.datasets", "hdf5"),
    "load_minari": ("rbdata.datasets", "minari"),
    "MinariReader": ("rbdata.datasets", "minari"),
    "OfflineToOnlineReplayBuffer": ("rbdata.buffers.offline_to_online", None),
    "RayBufferClient": ("rbdata.service.client.buffer_client", None),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'rbdata' has no attribute {name!r}")
    module_name, extra = _LAZY[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        if extra is None:
            raise
        raise ImportError(
            f"rbdata.{name} needs the '{extra}' extra: pip install 'rbdata[{extra}]' ({err})."
        ) from err
    value = getattr(module, name)
    globals()[name] = value
    return value


__all__ = [
    "CheckpointError",
    "Compose",
    "CompressedListStorage",
    "ConditionalUpdateResult",
    "FrameDedupStorage",
    "filter_trajectories",
    "find_start_stop_traj",
    "ImmutableDatasetWriter",
    "iter_trajectories",
    "LambdaScheduler",
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "LinearScheduler",
    "ListStorage",
    "load_d4rl_hdf5",
    "load_minari",
    "load_offline_data",
    "MinariReader",
    "OfflineToOnlineReplayBuffer",
    "ParameterScheduler",
    "PolicyAgeFilter",
    "PolicyVersion",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "RandomSampler",
    "RateLimitTimeoutError",
    "RayBufferClient",
    "ReplayBuffer",
    "ReplayCallback",
    "ReplayDataModule",
    "ReplayDataset",
    "RoundRobinWriter",
    "Sampler",
    "SamplerWithoutReplacement",
    "SampleToInsertRatio",
    "SampleUnit",
    "SchedulerList",
    "Sequence",
    "ServiceUnavailableError",
    "SharedMemoryFull",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "StepScheduler",
    "Storage",
    "TensorDictMaxValueWriter",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorDictRoundRobinWriter",
    "TensorStorage",
    "traj",
    "Trajectory",
    "TrajectoryPredicate",
    "Transform",
    "Transition",
    "Writer",
]

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
    RayReplayBuffer,
    RemoteTensorDictReplayBuffer,
    ReplayBuffer,
    ReplayBufferConfig,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    prefill_replay_buffer,
)
from rbdata.buffers._conditional_update import ConditionalUpdateResult
from rbdata.buffers.ensemble import ReplayBufferEnsemble
from rbdata.buffers.her import HERReplayBuffer, HindsightStrategy
from rbdata.errors import (
    CheckpointError,
    RateLimitTimeoutError,
    ServiceUnavailableError,
    SharedMemoryFull,
    UntrustedPathError,
)
from rbdata.policy_version import PolicyVersion
from rbdata.query import TrajectoryPredicate, filter_trajectories, iter_trajectories, traj
from rbdata.sample_units import SampleUnit, Sequence, Transition
from rbdata.samplers import (
    ConsumingSampler,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    PromptGroupSampler,
    RandomSampler,
    Sampler,
    SamplerEnsemble,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    StalenessAwareSampler,
    StreamingSliceSampler,
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
    CompressedListStorageCheckpointer,
    Flat2TED,
    FlatStorageCheckpointer,
    FrameDedupStorage,
    H5Combine,
    H5Split,
    H5StorageCheckpointer,
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    ListStorageCheckpointer,
    Nested2TED,
    NestedStorageCheckpointer,
    Storage,
    StorageCheckpointerBase,
    StorageEnsemble,
    StorageEnsembleCheckpointer,
    StoreStorage,
    TED2Flat,
    TED2Nested,
    TensorStorage,
    TensorStorageCheckpointer,
)
from rbdata.trajectories import DEFAULT_DONE_KEYS, Trajectory, find_start_stop_traj
from rbdata.transforms import Compose, PolicyAgeFilter, Transform
from rbdata.writers import (
    ImmutableDatasetWriter,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictRoundRobinWriter,
    Writer,
    WriterEnsemble,
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
    "CompressedListStorageCheckpointer",
    "Flat2TED",
    "FlatStorageCheckpointer",
    "H5Combine",
    "H5Split",
    "H5StorageCheckpointer",
    "ConditionalUpdateResult",
    "ConsumingSampler",
    "DEFAULT_DONE_KEYS",
    "filter_trajectories",
    "find_start_stop_traj",
    "FrameDedupStorage",
    "HERReplayBuffer",
    "HindsightStrategy",
    "ImmutableDatasetWriter",
    "iter_trajectories",
    "LambdaScheduler",
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "LinearScheduler",
    "ListStorage",
    "ListStorageCheckpointer",
    "load_d4rl_hdf5",
    "load_minari",
    "load_offline_data",
    "MinariReader",
    "OfflineToOnlineReplayBuffer",
    "ParameterScheduler",
    "PolicyAgeFilter",
    "PolicyVersion",
    "prefill_replay_buffer",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "PromptGroupSampler",
    "RandomSampler",
    "RateLimitTimeoutError",
    "RayBufferClient",
    "RayReplayBuffer",
    "RemoteTensorDictReplayBuffer",
    "ReplayBuffer",
    "ReplayBufferEnsemble",
    "ReplayBufferConfig",
    "ReplayCallback",
    "ReplayDataModule",
    "ReplayDataset",
    "RoundRobinWriter",
    "Sampler",
    "SamplerEnsemble",
    "SamplerWithoutReplacement",
    "SampleToInsertRatio",
    "SampleUnit",
    "SchedulerList",
    "Sequence",
    "ServiceUnavailableError",
    "SharedMemoryFull",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "StalenessAwareSampler",
    "StepScheduler",
    "Storage",
    "StorageCheckpointerBase",
    "StorageEnsemble",
    "StorageEnsembleCheckpointer",
    "Nested2TED",
    "NestedStorageCheckpointer",
    "TED2Flat",
    "TED2Nested",
    "StoreStorage",
    "StreamingSliceSampler",
    "TensorDictMaxValueWriter",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorDictRoundRobinWriter",
    "TensorStorage",
    "TensorStorageCheckpointer",
    "traj",
    "Trajectory",
    "TrajectoryPredicate",
    "Transform",
    "Transition",
    "UntrustedPathError",
    "Writer",
    "WriterEnsemble",
]

"""rbdata: a fast replay buffer for PyTorch with torchrl's ReplayBuffer API.

Everything public is importable as ``from rbdata import X``. Every name is
imported on first use, so ``import rbdata`` itself imports neither torch nor
tensordict; names that need an optional extra (Lightning, HDF5, Minari) raise an
ImportError naming the extra when it is missing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rbdata._start_method import default_to_spawn

if TYPE_CHECKING:  # what __getattr__ imports on first use, spelled out for type checkers
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

# name -> (module, extra needed): everything public is imported on first use, so that
# ``import rbdata`` (and ``rbdata --help``) does not import torch
_LAZY: dict[str, tuple[str, str | None]] = {
    "PrioritizedReplayBuffer": ("rbdata.buffers", None),
    "RayReplayBuffer": ("rbdata.buffers", None),
    "RemoteTensorDictReplayBuffer": ("rbdata.buffers", None),
    "ReplayBuffer": ("rbdata.buffers", None),
    "ReplayBufferConfig": ("rbdata.buffers", None),
    "TensorDictPrioritizedReplayBuffer": ("rbdata.buffers", None),
    "TensorDictReplayBuffer": ("rbdata.buffers", None),
    "prefill_replay_buffer": ("rbdata.buffers", None),
    "ConditionalUpdateResult": ("rbdata.buffers._conditional_update", None),
    "ReplayBufferEnsemble": ("rbdata.buffers.ensemble", None),
    "HERReplayBuffer": ("rbdata.buffers.her", None),
    "HindsightStrategy": ("rbdata.buffers.her", None),
    "CheckpointError": ("rbdata.errors", None),
    "RateLimitTimeoutError": ("rbdata.errors", None),
    "ServiceUnavailableError": ("rbdata.errors", None),
    "SharedMemoryFull": ("rbdata.errors", None),
    "UntrustedPathError": ("rbdata.errors", None),
    "PolicyVersion": ("rbdata.policy_version", None),
    "TrajectoryPredicate": ("rbdata.query", None),
    "filter_trajectories": ("rbdata.query", None),
    "iter_trajectories": ("rbdata.query", None),
    "traj": ("rbdata.query", None),
    "SampleUnit": ("rbdata.sample_units", None),
    "Sequence": ("rbdata.sample_units", None),
    "Transition": ("rbdata.sample_units", None),
    "ConsumingSampler": ("rbdata.samplers", None),
    "PrioritizedSampler": ("rbdata.samplers", None),
    "PrioritizedSliceSampler": ("rbdata.samplers", None),
    "PromptGroupSampler": ("rbdata.samplers", None),
    "RandomSampler": ("rbdata.samplers", None),
    "Sampler": ("rbdata.samplers", None),
    "SamplerEnsemble": ("rbdata.samplers", None),
    "SamplerWithoutReplacement": ("rbdata.samplers", None),
    "SliceSampler": ("rbdata.samplers", None),
    "SliceSamplerWithoutReplacement": ("rbdata.samplers", None),
    "StalenessAwareSampler": ("rbdata.samplers", None),
    "StreamingSliceSampler": ("rbdata.samplers", None),
    "LambdaScheduler": ("rbdata.samplers.schedulers", None),
    "LinearScheduler": ("rbdata.samplers.schedulers", None),
    "ParameterScheduler": ("rbdata.samplers.schedulers", None),
    "SchedulerList": ("rbdata.samplers.schedulers", None),
    "StepScheduler": ("rbdata.samplers.schedulers", None),
    "CompressedListStorage": ("rbdata.storages", None),
    "CompressedListStorageCheckpointer": ("rbdata.storages", None),
    "Flat2TED": ("rbdata.storages", None),
    "FlatStorageCheckpointer": ("rbdata.storages", None),
    "FrameDedupStorage": ("rbdata.storages", None),
    "H5Combine": ("rbdata.storages", None),
    "H5Split": ("rbdata.storages", None),
    "H5StorageCheckpointer": ("rbdata.storages", None),
    "LazyMemmapStorage": ("rbdata.storages", None),
    "LazyStackStorage": ("rbdata.storages", None),
    "LazyTensorStorage": ("rbdata.storages", None),
    "ListStorage": ("rbdata.storages", None),
    "ListStorageCheckpointer": ("rbdata.storages", None),
    "Nested2TED": ("rbdata.storages", None),
    "NestedStorageCheckpointer": ("rbdata.storages", None),
    "Storage": ("rbdata.storages", None),
    "StorageCheckpointerBase": ("rbdata.storages", None),
    "StorageEnsemble": ("rbdata.storages", None),
    "StorageEnsembleCheckpointer": ("rbdata.storages", None),
    "StoreStorage": ("rbdata.storages", None),
    "TED2Flat": ("rbdata.storages", None),
    "TED2Nested": ("rbdata.storages", None),
    "TensorStorage": ("rbdata.storages", None),
    "TensorStorageCheckpointer": ("rbdata.storages", None),
    "DEFAULT_DONE_KEYS": ("rbdata.trajectories", None),
    "Trajectory": ("rbdata.trajectories", None),
    "find_start_stop_traj": ("rbdata.trajectories", None),
    "Compose": ("rbdata.transforms", None),
    "PolicyAgeFilter": ("rbdata.transforms", None),
    "Transform": ("rbdata.transforms", None),
    "ImmutableDatasetWriter": ("rbdata.writers", None),
    "RoundRobinWriter": ("rbdata.writers", None),
    "TensorDictMaxValueWriter": ("rbdata.writers", None),
    "TensorDictRoundRobinWriter": ("rbdata.writers", None),
    "Writer": ("rbdata.writers", None),
    "WriterEnsemble": ("rbdata.writers", None),
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


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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

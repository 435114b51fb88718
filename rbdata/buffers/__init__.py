"""Replay buffers: thin orchestrators of storage, sampler, writer, sample unit and transforms."""

from rbdata.buffers.ensemble import ReplayBufferEnsemble
from rbdata.buffers.her import HERReplayBuffer, HindsightStrategy
from rbdata.buffers.prioritized import PrioritizedReplayBuffer
from rbdata.buffers.protocol import INFO_KEYS
from rbdata.buffers.replay import ReplayBuffer
from rbdata.buffers.tensordict import TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer

__all__ = [
    "HERReplayBuffer",
    "HindsightStrategy",
    "PrioritizedReplayBuffer",
    "ReplayBuffer",
    "ReplayBufferEnsemble",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
]

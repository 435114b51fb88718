"""Replay buffers: thin orchestrators of storage, sampler, writer, sample unit and transforms."""

from rbdata.buffers.config import ReplayBufferConfig
from rbdata.buffers.ensemble import ReplayBufferEnsemble
from rbdata.buffers.her import HERReplayBuffer, HindsightStrategy
from rbdata.buffers.prefill import prefill_replay_buffer
from rbdata.buffers.prioritized import PrioritizedReplayBuffer
from rbdata.buffers.protocol import INFO_KEYS
from rbdata.buffers.remote import RayReplayBuffer, RemoteTensorDictReplayBuffer
from rbdata.buffers.replay import ReplayBuffer
from rbdata.buffers.tensordict import TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer

__all__ = [
    "HERReplayBuffer",
    "HindsightStrategy",
    "PrioritizedReplayBuffer",
    "RayReplayBuffer",
    "RemoteTensorDictReplayBuffer",
    "ReplayBuffer",
    "ReplayBufferEnsemble",
    "ReplayBufferConfig",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "prefill_replay_buffer",
]

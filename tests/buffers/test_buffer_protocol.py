"""Every in-process buffer kind passes the ServableBuffer conformance checks."""

from __future__ import annotations

import pytest
import torch
from protocol_conformance import transitions

from rbdata import (
    LazyTensorStorage,
    OfflineToOnlineReplayBuffer,
    PolicyAgeFilter,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)

FACTORIES = {
    "ReplayBuffer": lambda: ReplayBuffer(storage=LazyTensorStorage(64), batch_size=4),
    "TensorDictReplayBuffer": lambda: TensorDictReplayBuffer(
        storage=LazyTensorStorage(64),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=4,
    ),
    "TensorDictPrioritizedReplayBuffer": lambda: TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(64), batch_size=4
    ),
    "without replacement": lambda: TensorDictReplayBuffer(
        storage=LazyTensorStorage(64), sampler=SamplerWithoutReplacement(), batch_size=4
    ),
    "with a PolicyAgeFilter": lambda: TensorDictReplayBuffer(
        storage=LazyTensorStorage(64),
        transform=PolicyAgeFilter(0, max_policy_lag=10),
        batch_size=4,
    ),
    "OfflineToOnlineReplayBuffer": lambda: OfflineToOnlineReplayBuffer(
        transitions(8, start=1000), online_capacity=64, batch_size=4, offline_fraction=0.5
    ),
}


@pytest.mark.parametrize("kind", list(FACTORIES))
def test_the_buffer_conforms_to_the_protocol(kind, tmp_path, check_servable):
    check_servable(FACTORIES[kind], tmp_path)


def test_a_non_buffer_is_not_servable():
    from rbdata.buffers.protocol import ServableBuffer

    assert not isinstance(torch.zeros(3), ServableBuffer)
    assert not isinstance({"sample": 1}, ServableBuffer)

"""Writers: where new items go (round robin with generations, max value, immutable)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    ImmutableDatasetWriter,
    LazyTensorStorage,
    ReplayBuffer,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    TensorDictReplayBuffer,
    TensorStorage,
)


def test_compilable_writer_in_compiled_step():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), compilable=True)

    @torch.compile(backend="eager")
    def step(x):
        y = x * 2
        rb.extend(y)
        return y

    step(torch.arange(4.0))
    step(torch.arange(4.0))
    assert len(rb) == 8 and rb[:4].tolist() == [0.0, 2.0, 4.0, 6.0]


def test_max_value_writer_keeps_top_items():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(3), writer=TensorDictMaxValueWriter(rank_key="r")
    )
    rb.extend(TensorDict({"r": torch.tensor([1.0, 9.0, 3.0, 7.0, 0.0, 8.0])}, [6]))
    assert sorted(rb[:]["r"].tolist()) == [7.0, 8.0, 9.0]
    with pytest.raises(KeyError, match="rank_key"):
        rb.extend(TensorDict({"q": torch.ones(1)}, [1]))


def test_immutable_writer_refuses():
    rb = ReplayBuffer(storage=TensorStorage(torch.arange(5)), writer=ImmutableDatasetWriter())
    assert len(rb) == 5
    with pytest.raises(RuntimeError, match="read-only"):
        rb.extend(torch.arange(2))
    assert rb[:].tolist() == [0, 1, 2, 3, 4]


def test_round_robin_cursor_wraps_and_generations_count_rewrites():
    storage = LazyTensorStorage(3)
    writer = RoundRobinWriter(track_generations=True)
    writer.register_storage(storage)
    assert writer.extend(torch.arange(5)).tolist() == [0, 1, 2, 0, 1]
    assert writer.cursor == 2 and writer.write_count == 5
    assert writer.generations_of(torch.tensor([0, 1, 2])).tolist() == [1, 1, 0]

"""prefill_replay_buffer: torchrl's helper seeding a buffer with samples of a dataset."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, ReplayBuffer, prefill_replay_buffer


def _dataset(n: int) -> ReplayBuffer:
    dataset = ReplayBuffer(storage=LazyTensorStorage(n))
    dataset.extend(TensorDict({"obs": torch.arange(n)}, [n]))
    return dataset


def test_copies_n_samples_in_chunks_and_returns_the_buffer() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(1000))
    assert prefill_replay_buffer(rb, _dataset(50), n_samples=23, chunk_size=10) is rb
    assert len(rb) == 23
    assert set(rb[:]["obs"].tolist()) <= set(range(50))


def test_without_n_samples_copies_len_dataset_and_caps_n_samples() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(1000))
    prefill_replay_buffer(rb, _dataset(30))
    assert len(rb) == 30
    prefill_replay_buffer(rb, _dataset(5), n_samples=100)
    assert len(rb) == 35


def test_reads_local_offline_data_by_path_with_a_prefix(tmp_path: Path) -> None:
    data = TensorDict({"obs": torch.arange(12)}, [12])
    data.memmap(tmp_path / "data")
    rb = ReplayBuffer(storage=LazyTensorStorage(100))
    prefill_replay_buffer(rb, f"d4rl:{tmp_path / 'data'}", n_samples=7)
    assert len(rb) == 7 and set(rb[:]["obs"].tolist()) <= set(range(12))


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"dataset": 3}, TypeError),
        ({"n_samples": -1}, ValueError),
        ({"n_samples": 1.5}, TypeError),
        ({"chunk_size": 0}, ValueError),
    ],
)
def test_bad_arguments_change_nothing(kwargs: dict[str, object], error: type) -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(100))
    args: dict[str, object] = {"dataset": _dataset(5), **kwargs}
    with pytest.raises(error):
        prefill_replay_buffer(rb, **args)  # type: ignore[arg-type]
    assert len(rb) == 0

"""Generations over an unbounded storage (ListStorage()) grow with the slots written."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rbdata import LazyStackStorage, ListStorage, TensorDictReplayBuffer, TensorDictRoundRobinWriter


def _buffer(storage: object) -> TensorDictReplayBuffer:
    return TensorDictReplayBuffer(
        storage=storage, writer=TensorDictRoundRobinWriter(track_generations=True)
    )


def test_default_list_storages_are_unbounded() -> None:
    for make in (ListStorage, LazyStackStorage):
        rb = _buffer(make())
        rb.extend(TensorDict({"a": torch.arange(1500)}, [1500]))  # past 1,000: nothing lost
        assert len(rb) == 1500 and rb[0]["a"].item() == 0 and rb[1499]["a"].item() == 1499


def test_generations_grow_and_round_trip() -> None:
    rb = _buffer(ListStorage())
    rb.extend(TensorDict({"a": torch.arange(1500)}, [1500]))
    rb.add(TensorDict({"a": torch.tensor(7)}, []))
    stamps = rb.writer.generations_of(torch.tensor([0, 1500, 1501, 10**6]))
    assert stamps.tolist() == [0, 0, -1, -1]
    assert rb.sample(4)["index_generation"].tolist() == [0, 0, 0, 0]
    other = _buffer(ListStorage())
    other.load_state_dict(rb.state_dict())
    assert len(other) == 1501
    assert other.writer.generations_of(torch.tensor([1500, 1501])).tolist() == [0, -1]

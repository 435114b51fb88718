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


def _rows(n: int) -> TensorDict:
    return TensorDict({"obs": torch.arange(n).float().unsqueeze(1), "id": torch.arange(n)}, [n])


@pytest.mark.parametrize("data_kind", ["tensordict", "tensor"])
def test_write_at_writes_runs_of_slots_as_slices(data_kind, monkeypatch):
    """Long runs (a wrapped ring of free slots, a few live ones skipped) are slice copies."""
    storage = LazyTensorStorage(6000)
    writer = RoundRobinWriter(track_generations=True)
    writer.register_storage(storage)
    make = _rows if data_kind == "tensordict" else (lambda n: torch.arange(n) * 10)
    writer.extend(make(6000))
    index = torch.cat([torch.arange(4000, 6000), torch.arange(0, 1500), torch.arange(1510, 3000)])
    calls = []
    original = type(storage).set

    def spy(self, where, data, **kwargs):
        calls.append(where)
        return original(self, where, data, **kwargs)

    monkeypatch.setattr(type(storage), "set", spy)
    fresh = make(index.numel())
    assert torch.equal(writer.write_at(index, fresh), index)
    assert calls == [slice(4000, 6000), slice(0, 1500), slice(1510, 3000)]
    stored = storage.get(index)
    if data_kind == "tensordict":
        stored, fresh = stored["id"], fresh["id"]
    assert torch.equal(stored, fresh)
    assert writer.cursor == 0 and writer.write_count == 6000 + index.numel()
    assert writer.generations_of(torch.tensor([0, 1505, 4000])).tolist() == [1, 0, 1]


def test_write_at_of_runs_is_all_or_nothing():
    storage = LazyTensorStorage(6000)
    writer = RoundRobinWriter()
    writer.register_storage(storage)
    writer.extend(_rows(6000))
    index = torch.cat([torch.arange(3000, 6000), torch.arange(0, 3000)])
    bad = TensorDict(
        {"obs": torch.zeros(6000, 1), "id": torch.zeros(6000, 2, dtype=torch.long)}, [6000]
    )
    with pytest.raises(ValueError):
        writer.write_at(index, bad)
    assert torch.equal(storage.get(torch.arange(6000))["id"], torch.arange(6000))
    assert writer.write_count == 6000


def test_write_at_of_scattered_slots_is_one_indexed_write():
    storage = LazyTensorStorage(100)
    writer = RoundRobinWriter()
    writer.register_storage(storage)
    writer.extend(_rows(100))
    index = torch.tensor([7, 3, 50, 51, 52])
    writer.write_at(index, _rows(5).apply(lambda t: t + 1000))
    assert storage.get(index)["id"].tolist() == [1000, 1001, 1002, 1003, 1004]


def test_write_at_of_its_own_rows_reads_them_before_writing():
    """A batch of views of the very rows it overwrites: a later run reads the rows as they were."""
    storage = LazyTensorStorage(4096)
    writer = RoundRobinWriter()
    writer.register_storage(storage)
    writer.extend(_rows(4096))
    own = TensorDict({key: storage.get_leaf(key) for key in ("obs", "id")}, [4096])
    index = torch.cat([torch.arange(2048, 4096), torch.arange(0, 2048)])
    writer.write_at(index, own)
    assert storage.get(torch.arange(4096))["id"].tolist() == [*range(2048, 4096), *range(2048)]

"""Ragged lazy stacks (members differing in shape or keys) in tensor storages.

torchrl's ``test_extend_lazystack``: a ``LazyStackedTensorDict`` stacked along an item dim
whose members cannot be read densely is stored member by member and read back as a lazy
stack along the same dim.
"""

from __future__ import annotations

import io

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from rbdata import LazyMemmapStorage, LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer

STORAGES = [LazyTensorStorage, LazyMemmapStorage]


def _ragged(n: int = 5) -> LazyStackedTensorDict:
    first = TensorDict(a=torch.rand(n, 4, 8), b=torch.zeros(n), batch_size=[n])
    second = TensorDict(a=torch.rand(n, 3, 8), b=torch.ones(n), batch_size=[n])
    return LazyStackedTensorDict(first, second, stack_dim=1)


def _same(x: LazyStackedTensorDict, y: LazyStackedTensorDict) -> bool:
    return all(
        torch.equal(u["a"], v["a"]) and torch.equal(u["b"], v["b"])
        for u, v in zip(x.unbind(1), y.unbind(1), strict=True)
    )


@pytest.mark.parametrize("storage_type", STORAGES)
def test_a_ragged_lazy_stack_is_stored_and_read_back_as_one(storage_type):
    data = _ragged()
    rb = ReplayBuffer(storage=storage_type(6), batch_size=3)
    rb.extend(data)
    assert len(rb) == 5
    sample = rb.sample()
    assert isinstance(sample, LazyStackedTensorDict)
    assert sample.batch_size == torch.Size([3, 2]) and sample.stack_dim == 1
    stored = rb[:]
    assert stored.batch_size == torch.Size([5, 2])
    assert _same(stored, data)
    rb.extend(data[:3])  # wraps around: slot 5, then 0 and 1
    assert _same(rb[torch.tensor([5, 0, 1])], data[:3])


@pytest.mark.parametrize("storage_type", STORAGES)
def test_one_ragged_item_is_added(storage_type):
    data = _ragged()
    rb = ReplayBuffer(storage=storage_type(6))
    with pytest.warns(UserWarning, match="stored as one element"):  # as torchrl warns
        rb.add(data[2])
    assert len(rb) == 1
    assert torch.equal(rb[0][1]["a"], data[2][1]["a"])


@pytest.mark.parametrize("storage_type", STORAGES)
def test_a_write_that_does_not_match_the_ragged_layout_is_refused_and_changes_nothing(
    storage_type,
):
    data = _ragged()
    rb = ReplayBuffer(storage=storage_type(6))
    rb.extend(data)
    dense = TensorDict(a=torch.rand(2, 4, 8), b=torch.zeros(2), batch_size=[2])
    with pytest.raises(TypeError, match="LazyStackedTensorDict of 2 TensorDicts"):
        rb.extend(dense)
    other = LazyStackedTensorDict(
        TensorDict(a=torch.rand(2, 5, 8), b=torch.zeros(2), batch_size=[2]),
        TensorDict(a=torch.rand(2, 3, 8), b=torch.zeros(2), batch_size=[2]),
        stack_dim=1,
    )
    with pytest.raises(ValueError, match=r"got shape \[\d, 5, 8\], expected \[\d, 4, 8\]"):
        rb.extend(other)
    assert len(rb) == 5
    assert _same(rb[:], data)


def test_the_ragged_layout_survives_a_state_dict_round_trip():
    data = _ragged()
    rb = ReplayBuffer(storage=LazyTensorStorage(6))
    rb.extend(data)
    buf = io.BytesIO()
    torch.save(rb.state_dict(), buf)
    buf.seek(0)
    other = ReplayBuffer(storage=LazyTensorStorage(6))
    other.load_state_dict(torch.load(buf, weights_only=True))
    assert len(other) == 5
    assert _same(other[:], data)


def test_dumps_and_loads_keep_the_ragged_layout(tmp_path):
    data = _ragged()
    rb = ReplayBuffer(storage=LazyMemmapStorage(6, scratch_dir=tmp_path / "rows"))
    rb.extend(data)
    rb.dumps(tmp_path / "dump")
    other = ReplayBuffer(storage=LazyMemmapStorage(6, scratch_dir=tmp_path / "rows2"))
    other.loads(tmp_path / "dump")
    assert _same(other[:], data)


def test_a_tensordict_buffer_samples_a_ragged_stack_with_its_index():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(6), batch_size=3)
    rb.extend(_ragged())
    sample = rb.sample()
    assert isinstance(sample, LazyStackedTensorDict)
    assert sample["index"].shape == torch.Size([3, 2])


def test_a_lazy_stack_whose_members_match_is_stored_densely_as_before():
    members = [TensorDict(a=torch.rand(5, 4), batch_size=[5]) for _ in range(2)]
    rb = ReplayBuffer(storage=LazyTensorStorage(6))
    rb.extend(LazyStackedTensorDict(*members, stack_dim=1))
    assert type(rb[:]) is TensorDict
    assert rb.storage.leaf_keys() == ["a"]

"""torchrl's storage keywords and hooks: set_cursor, _init, ndim>1 items by int, save hooks."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import ReplayBuffer
from rbdata.storages import (
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    TensorStorage,
)

LAZY = [LazyTensorStorage, LazyMemmapStorage]


@pytest.mark.parametrize("storage_type", [*LAZY, ListStorage])
def test_set_cursor_false_writes_without_counting(storage_type):
    storage = storage_type(10)
    storage.set(slice(0, 3), torch.arange(3).unsqueeze(-1))
    revision = storage._mutation_revision
    storage.set(slice(3, 6), torch.arange(3).unsqueeze(-1) + 10, set_cursor=False)
    assert len(storage) == 3
    assert storage._last_cursor_index == 2
    assert storage._mutation_revision == revision + 1
    storage.set(slice(3, 5), torch.tensor([[7], [8]]))  # counted now
    assert len(storage) == 5 and storage._last_cursor_index == 4


@given(pre=st.integers(1, 6), counted=st.integers(0, 6))
@settings(max_examples=20, deadline=None)
def test_set_cursor_false_never_moves_len(pre, counted):
    storage = LazyTensorStorage(12)
    if counted:
        storage.set(slice(0, counted), torch.zeros(counted, 2))
    storage.set(slice(6, 6 + pre), torch.ones(pre, 2), set_cursor=False)
    assert len(storage) == counted
    if counted:  # the counted rows are untouched
        assert (storage[:] == 0).all()


@pytest.mark.parametrize("storage_type", LAZY)
def test_prefilled_ndim2_storage_reads_items_by_int(storage_type):
    steps = 5
    storage = storage_type(20 * steps, ndim=2)
    storage.set(0, TensorDict({"x": torch.zeros(steps, 3)}, [steps]), set_cursor=False)
    storage.set(
        slice(0, 20), TensorDict({"x": torch.zeros(20, steps, 3)}, [20, steps]), set_cursor=False
    )
    assert len(storage) == 0
    data = TensorDict({"x": torch.rand(4, steps, 3)}, [4, steps])
    storage.set(torch.tensor([0, 1, 2, 3]), data)
    assert len(storage) == 4 * steps
    for i in range(4):
        item = storage[i]  # an int is an item along dim 0 (torchrl's storage[i])
        assert item.batch_size == torch.Size([steps])
        torch.testing.assert_close(item["x"], data[i]["x"])
    torch.testing.assert_close(storage[-1]["x"], data[3]["x"])
    with pytest.raises(IndexError):
        storage[4]


@pytest.mark.parametrize("storage_type", LAZY)
def test_init_lays_out_rows_from_one_item(storage_type):
    item = TensorDict({"a": torch.ones(3, 4), "n": {"b": torch.zeros(3, 4, 2)}}, [3, 4])
    storage = storage_type(50)
    storage._init(item)
    assert storage.initialized and len(storage) == 0
    assert storage._storage.shape == (50, 3, 4)
    with pytest.raises(RuntimeError, match="already initialized"):
        storage._init(item)


def test_tensor_storage_refuses_none_and_a_max_size_mismatch():
    with pytest.raises(ValueError, match="Expected storage to be non-null"):
        TensorStorage(None)
    with pytest.raises(ValueError, match="The max-size and the storage shape mismatch"):
        TensorStorage(torch.randn(3), max_size=4)


@pytest.mark.parametrize("storage_type", [ListStorage, LazyStackStorage])
def test_list_storages_accept_max_size_none_as_unbounded(storage_type):
    storage = storage_type(max_size=None)
    assert storage.max_size == torch.iinfo(torch.int64).max
    rb = ReplayBuffer(storage=storage)
    for _ in range(3):
        rb.add(TensorDict(a=torch.randn(2), b=torch.ones(2)))
    assert len(rb) == 3
    assert rb.sample(4)["b"].shape == (4, 2)


def test_save_hooks_get_shift_and_is_full(tmp_path):
    class Hook:
        shift = None
        is_full = None

        def __call__(self, data, path):
            return data

    hook, plain = Hook(), []
    rb = ReplayBuffer(storage=LazyMemmapStorage(10))
    rb.register_save_hook(hook)
    rb.register_save_hook(lambda data, path: plain.append(1) or data)  # no attributes: left alone
    rb.extend(torch.arange(5))
    rb.dumps(tmp_path / "a")
    assert (hook.shift, hook.is_full, plain) == (5, False, [1])
    rb.extend(torch.arange(7))  # wraps: the last slot written is 1
    rb.dumps(tmp_path / "b")
    assert (hook.shift, hook.is_full) == (2, True)


def test_list_storage_state_uses_torchrl_key_and_load_copies():
    storage = ListStorage(10)
    storage.set(0, torch.randn(3))
    storage.set(1, TensorDict({"a": torch.randn(3)}, [3]))
    storage.set(2, "text")
    sd = storage.state_dict()
    assert sorted(sd) == ["_storage", "len"] and sd["len"] == 3
    other = ListStorage(10)
    other.load_state_dict(sd)
    before = (other.get(0).clone(), other.get(1).clone())
    sd["_storage"][0].zero_()
    sd["_storage"][1]["a"].zero_()
    torch.testing.assert_close(other.get(0), before[0])
    torch.testing.assert_close(other.get(1)["a"], before[1]["a"])
    assert other.get(2) == "text"
    legacy = ListStorage(10)
    legacy.load_state_dict({"len": 1, "items": [torch.ones(2)]})  # states saved before
    assert (legacy.get(0) == 1).all()


def test_list_storage_dumps_round_trip(tmp_path):
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.extend([torch.full((2,), i) for i in range(4)])
    rb.dumps(tmp_path)
    other = ReplayBuffer(storage=ListStorage(10))
    other.loads(tmp_path)
    assert len(other) == 4 and (other[3] == 3).all()

"""Tests of rbdata.storages: list, lazy-stack, tensor, lazy tensor and memmap storages."""

from __future__ import annotations

import gc
import io
import math
import os
import pickle
import threading

import pytest
import torch
import torch.multiprocessing as mp
from hypothesis import given
from hypothesis import strategies as st
from tensordict import LazyStackedTensorDict, TensorDict

from rbdata.storages import (
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    Storage,
    TensorStorage,
)
from rbdata.storages._recycle import _MAX_BUFFERS

# ------------------------------------------------------------------ helpers


def make_td(n: int, offset: int = 0) -> TensorDict:
    base = torch.arange(offset, offset + n)
    return TensorDict(
        {
            "obs": base.float().unsqueeze(-1).expand(n, 3).clone(),
            "action": base.to(torch.int32).unsqueeze(-1).expand(n, 2).clone(),
            "next": {
                "reward": base.double(),
                "done": (base % 2 == 0).unsqueeze(-1),
                "pixels": base.to(torch.uint8).view(n, 1, 1).expand(n, 2, 2).clone(),
            },
        },
        [n],
    )


def make_tree(n: int, offset: int = 0) -> dict:
    base = torch.arange(offset, offset + n).float()
    return {
        "a": base.unsqueeze(-1).expand(n, 3).clone(),
        "b": {"c": (base * 2, [base.long().unsqueeze(-1)])},
        30: -base,
    }


def make_tensor(n: int, offset: int = 0) -> torch.Tensor:
    return torch.arange(offset, offset + n).float().unsqueeze(-1).expand(n, 4).clone()


MAKERS = {"tensordict": make_td, "pytree": make_tree, "tensor": make_tensor}


def flat(data) -> list[torch.Tensor]:
    """Leaves of a tensor / TensorDict / PyTree, in a stable order."""
    if isinstance(data, torch.Tensor):
        return [data]
    if isinstance(data, TensorDict):
        return [data.get(k) for k in sorted(data.keys(True, True), key=str)]
    if isinstance(data, dict):
        return [t for k in data for t in flat(data[k])]
    return [t for v in data for t in flat(v)]


def assert_same(a, b) -> None:
    la, lb = flat(a), flat(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert torch.equal(x, y)


def select(data, index):
    if isinstance(data, torch.Tensor | TensorDict):
        return data[index]
    if isinstance(data, dict):
        return {k: select(v, index) for k, v in data.items()}
    return type(data)(select(v, index) for v in data)


def lazy(kind: str, max_size: int, tmp_path, **kwargs) -> Storage:
    if kind == "memmap":
        return LazyMemmapStorage(max_size, scratch_dir=tmp_path / "mm", **kwargs)
    return LazyTensorStorage(max_size, **kwargs)


STORAGE_KINDS = ["lazy", "memmap"]


# --------------------------------------------------------------- ListStorage


def test_list_storage_round_trip_and_indexing():
    storage = ListStorage(max_size=5)
    assert storage.max_size == 5 and len(storage) == 0 and storage.initialized
    storage.set(torch.arange(3), ["a", 1, None])
    assert len(storage) == 3
    assert storage.get(torch.tensor([2, 0])) == [None, "a"]
    assert storage[1] == 1 and storage[-3] == "a"
    assert storage[:] == ["a", 1, None] and storage[1:10] == [1, None]
    assert storage.get(torch.tensor([[0, 1], [1, 2]])) == [["a", 1], [1, None]]
    storage[3] = {"x": 1}
    assert len(storage) == 4 and storage[3] == {"x": 1}
    storage.set(torch.tensor([4, 0]), ["e", "z"])
    assert storage[:] == ["z", 1, None, {"x": 1}, "e"]


def test_list_storage_errors_change_nothing():
    storage = ListStorage(max_size=3)
    storage.set(slice(0, 2), [1, 2])
    with pytest.raises(IndexError, match="5"):
        storage.set(5, "x")
    with pytest.raises(IndexError, match="valid indices"):
        storage.get(2)
    with pytest.raises(IndexError):
        storage.get(torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="2 item"):
        storage.set(torch.tensor([0, 1]), [7])
    with pytest.raises(TypeError, match="sequence"):
        storage.set(slice(0, 1), 3)
    with pytest.raises(TypeError, match="integers"):
        storage.get(torch.tensor([0.0]))
    assert storage[:] == [1, 2] and len(storage) == 2


def test_list_storage_state_dict_and_empty():
    storage = ListStorage(10)
    storage.set(slice(0, 3), [torch.ones(2), torch.zeros(1), torch.arange(3)])
    buffer = io.BytesIO()
    torch.save(storage.state_dict(), buffer)
    buffer.seek(0)
    fresh = ListStorage(10)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    assert len(fresh) == 3 and torch.equal(fresh[2], torch.arange(3))
    with pytest.raises(ValueError, match="max_size"):
        ListStorage(2).load_state_dict(storage.state_dict())
    storage.empty()
    assert len(storage) == 0 and storage[:] == []


def test_lazy_stack_storage_heterogeneous_shapes():
    storage = LazyStackStorage(max_size=10)
    storage.set(0, TensorDict({"obs": torch.zeros(2)}))
    storage.set(1, TensorDict({"obs": torch.ones(5)}))
    batch = TensorDict({"obs": torch.full((3, 4), 2.0)}, [3])
    storage.set(torch.tensor([2, 3, 4]), batch)
    assert len(storage) == 5
    out = storage.get(torch.tensor([1, 0, 3]))
    assert isinstance(out, LazyStackedTensorDict)
    assert out[0]["obs"].shape == (5,) and out[1]["obs"].shape == (2,)
    assert torch.equal(out[2]["obs"], torch.full((4,), 2.0))
    assert isinstance(storage[:], LazyStackedTensorDict) and len(storage[:]) == 5
    assert storage[4]["obs"].shape == (4,)


# ----------------------------------------------------------- tensor storages


@pytest.mark.parametrize("kind", STORAGE_KINDS)
@pytest.mark.parametrize("data_kind", list(MAKERS))
def test_round_trip_every_data_kind(kind, data_kind, tmp_path):
    make = MAKERS[data_kind]
    storage = lazy(kind, 20, tmp_path)
    assert not storage.initialized and len(storage) == 0
    data = make(8)
    storage.set(slice(0, 8), data)
    assert storage.initialized and len(storage) == 8
    assert storage.has_tensordict_leaves == (data_kind == "tensordict")
    index = torch.tensor([7, 0, 3, 3])
    out = storage.get(index)
    assert_same(out, select(data, index))
    assert_same(storage[:], data)
    assert_same(storage[2:5], select(data, slice(2, 5)))
    assert_same(storage[-1], select(data, 7))
    assert_same(
        storage.get(torch.tensor([[1, 2], [3, 4]])), select(data, torch.tensor([[1, 2], [3, 4]]))
    )
    if data_kind == "tensordict":
        assert type(out) is TensorDict and out.batch_size == torch.Size([4])
        assert type(out["next"]) is TensorDict and out["next"].batch_size == torch.Size([4])
        assert out.device == torch.device("cpu")
        assert storage.get(torch.tensor([[1, 2]])).batch_size == torch.Size([1, 2])
    if data_kind == "pytree":
        assert isinstance(out["b"]["c"], tuple) and isinstance(out["b"]["c"][1], list)
        assert 30 in out and out[30].shape == (4,)


def test_reference_pytree_example():
    storage = LazyTensorStorage(100)
    data = {"a": torch.randn(3), "b": {"c": (torch.zeros(2), [torch.ones(1)])}, 30: -torch.ones(())}
    storage.set(0, data)
    sample = storage.get(torch.zeros(10, dtype=torch.long))
    assert sample["a"].shape == (10, 3) and sample[30].shape == (10,)
    assert sample["b"]["c"][0].shape == (10, 2) and sample["b"]["c"][1][0].shape == (10, 1)
    assert storage.leaf_keys() == ["a", ("b", "c", 0), ("b", "c", 1, 0), 30]


def test_scalar_items_and_single_tensor_keys():
    storage = LazyTensorStorage(10)
    storage.set(slice(0, 5), torch.arange(5))
    assert len(storage) == 5 and storage.leaf_keys() == [()]
    assert torch.equal(storage.get(torch.tensor([4, 0])), torch.tensor([4, 0]))
    assert storage[3].shape == () and int(storage[3]) == 3
    assert torch.equal(storage.get_leaf(()), torch.tensor([0, 1, 2, 3, 4, 0, 0, 0, 0, 0]))


def test_many_dtypes_bit_exact():
    n = 6
    data = TensorDict(
        {
            "b": torch.tensor([True, False] * 3),
            "i8": torch.arange(n, dtype=torch.int8) - 3,
            "f16": torch.randn(n, 3).half(),
            "bf16": torch.randn(n).bfloat16(),
            "c64": torch.randn(n, 2, dtype=torch.complex64),
            "c128": torch.randn(n, dtype=torch.complex128),
            "f64": torch.tensor([float("nan"), float("inf"), -0.0, 1e-300, 2.0, 3.0]),
            "i64": torch.arange(n) * (2**40),
            "empty": torch.zeros(n, 0, 3),
        },
        [n],
    )
    storage = LazyTensorStorage(n)
    storage.set(slice(0, n), data)
    out = storage[:]
    for key in data.keys():
        assert out[key].dtype == data[key].dtype and out[key].shape == data[key].shape
        bits = out[key].contiguous().reshape(-1).view(torch.uint8)
        assert torch.equal(bits, data[key].reshape(-1).view(torch.uint8))


def test_tensordict_item_batch_dims_are_kept():
    storage = LazyTensorStorage(10)
    data = TensorDict({"x": torch.randn(4, 2, 3), "y": {"z": torch.randn(4, 2)}}, [4, 2])
    storage.set(slice(0, 4), data)
    out = storage.get(torch.tensor([1, 3]))
    assert out.batch_size == torch.Size([2, 2]) and out["y"].batch_size == torch.Size([2, 2])
    assert torch.equal(out["x"], data["x"][[1, 3]])


def test_tensor_storage_wraps_data_as_full():
    data = make_td(6)
    storage = TensorStorage(data)
    assert storage.max_size == 6 and len(storage) == 6 and storage.shape == torch.Size([6])
    assert_same(storage[:], data)
    storage.set(0, make_td(1, offset=50)[0])
    assert data["obs"][0, 0] == 0, "the storage holds its own copy"
    assert storage[0]["obs"][0] == 50
    assert TensorStorage(torch.arange(5), max_size=5).max_size == 5
    with pytest.raises(ValueError, match="max_size"):
        TensorStorage(torch.arange(5), max_size=7)


@pytest.mark.parametrize("kind", STORAGE_KINDS)
def test_wrap_around_and_scattered_writes(kind, tmp_path):
    storage = lazy(kind, 6, tmp_path)
    storage.set(slice(0, 6), make_td(6))
    storage.set(torch.tensor([4, 5, 0, 1]), make_td(4, offset=100))
    assert storage.get_leaf("obs")[:, 0].tolist() == [102, 103, 2, 3, 100, 101]
    storage.set(torch.tensor([3, 0, 5]), make_td(3, offset=200))
    assert storage.get_leaf("obs")[:, 0].tolist() == [201, 103, 2, 200, 100, 202]
    assert storage.get_leaf(("next", "reward")).tolist() == [201, 103, 2, 200, 100, 202]
    storage.set(slice(0, 6, 2), make_td(3, offset=300))
    assert storage.get_leaf("action")[:, 1].tolist() == [300, 103, 301, 200, 302, 202]
    storage.set(-1, make_td(1, offset=400)[0])
    assert storage[5]["obs"][0] == 400 and len(storage) == 6


def test_wrap_write_keeps_length_and_uses_both_runs():
    storage = LazyTensorStorage(5)
    storage.set(slice(0, 3), torch.arange(3))
    storage.set(torch.tensor([3, 4, 0]), torch.tensor([13, 14, 10]))
    assert len(storage) == 5 and storage[:].tolist() == [10, 1, 2, 13, 14]


@pytest.mark.parametrize("kind", STORAGE_KINDS)
def test_get_returns_copies(kind, tmp_path):
    storage = lazy(kind, 10, tmp_path)
    storage.set(slice(0, 4), make_td(4))
    samples = [storage.get(torch.tensor([1, 2])), storage[1], storage[1:3]]
    storage.set(slice(0, 4), make_td(4, offset=50))
    assert samples[0]["obs"][:, 0].tolist() == [1, 2]
    assert samples[1]["obs"][0] == 1 and samples[2]["next", "reward"].tolist() == [1, 2]
    samples[0]["obs"].fill_(-1)
    assert storage[1]["obs"][0] == 51


def test_get_leaf_is_a_writable_full_view():
    storage = LazyTensorStorage(8)
    storage.set(slice(0, 3), make_td(3))
    leaf = storage.get_leaf(("next", "done"))
    assert leaf.shape == (8, 1) and leaf.dtype == torch.bool
    leaf[1] = True
    assert storage[1]["next", "done"].item() is True
    with pytest.raises(KeyError, match="missing"):
        storage.get_leaf("missing")


def test_properties_and_empty():
    storage = LazyTensorStorage(8, device="cpu")
    assert storage.device == torch.device("cpu") and storage.shape == torch.Size([8])
    assert storage.leaf_keys() == [] and not storage.has_tensordict_leaves
    storage.set(slice(0, 3), make_td(3))
    assert set(storage.leaf_keys()) == {
        "obs",
        "action",
        ("next", "reward"),
        ("next", "done"),
        ("next", "pixels"),
    }
    storage.empty()
    assert len(storage) == 0 and storage.initialized
    with pytest.raises(IndexError):
        storage.get(torch.tensor([0]))
    assert storage[:].batch_size == torch.Size([0])


# ---------------------------------------------------------------- validation


def _content(storage):
    return {k: v.clone() for k, v in storage.state_dict()["content"].items()}


BAD_TD = {
    "extra key and wrong dtype": (  # a new key is added: the other leaves are still checked
        TypeError,
        "'obs'.*float64.*float32",
        lambda td: td.set("foo", torch.zeros(4)).set("obs", torch.zeros(4, 3, dtype=torch.float64)),
    ),
    "wrong shape": (
        ValueError,
        "'obs'.*\\[4, 5\\].*\\[4, 3\\]",
        lambda td: td.set("obs", torch.zeros(4, 5)),
    ),
    "wrong dtype": (
        TypeError,
        "'obs'.*float64.*float32",
        lambda td: td.set("obs", torch.zeros(4, 3, dtype=torch.float64)),
    ),
    "nested wrong dtype": (
        TypeError,
        "'next', 'done'",
        lambda td: td.set(("next", "done"), torch.zeros(4, 1)),
    ),
    "tensor for dict": (
        TypeError,
        "'next'.*TensorDict",
        lambda td: td.exclude("next").set("next", torch.zeros(4)),
    ),
}


@pytest.mark.parametrize("kind", STORAGE_KINDS)
@pytest.mark.parametrize("case", list(BAD_TD))
def test_validation_errors_write_nothing(kind, case, tmp_path):
    error, match, corrupt = BAD_TD[case]
    storage = lazy(kind, 10, tmp_path)
    storage.set(slice(0, 6), make_td(6))
    before = _content(storage)
    bad = corrupt(make_td(4, offset=50))
    with pytest.raises(error, match=match):
        storage.validate(bad, batched=True)
    with pytest.raises(error, match=match):
        storage.set(torch.tensor([1, 2, 3, 7]), bad)
    with pytest.raises(error, match=match):
        storage.set(slice(6, 10), bad)
    assert len(storage) == 6
    after = _content(storage)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_pytree_and_tensor_validation():
    storage = LazyTensorStorage(10)
    storage.set(slice(0, 3), make_tree(3))
    tree = make_tree(2)
    tree["b"]["c"] = [tree["b"]["c"][0], tree["b"]["c"][1]]
    with pytest.raises(TypeError, match="tuple"):
        storage.set(slice(3, 5), tree)
    tree = make_tree(2)
    tree["b"]["c"] = (tree["b"]["c"][0],)
    with pytest.raises(TypeError, match="1 elements|of 2 elements"):
        storage.set(slice(3, 5), tree)
    tree = make_tree(2)
    del tree[30]
    with pytest.raises(KeyError, match="30"):
        storage.set(slice(3, 5), tree)
    with pytest.raises(ValueError, match="3 item"):
        storage.set(slice(3, 6), make_tree(2))
    with pytest.raises(TypeError, match="holds tensors"):
        LazyTensorStorage(4).set(0, {"a": 1.0})
    with pytest.raises(ValueError, match="shape"):
        storage.set(slice(3, 5), {**make_tree(2), "a": torch.zeros(3, 3)})
    assert len(storage) == 3
    single = LazyTensorStorage(4)
    single.set(slice(0, 2), torch.zeros(2, 3))
    with pytest.raises(TypeError, match="a tensor"):
        single.set(slice(0, 2), {"x": torch.zeros(2, 3)})
    with pytest.raises(ValueError, match=r"\[2, 4\].*\[2, 3\]"):
        single.validate(torch.zeros(2, 4), batched=True)
    single.validate(torch.zeros(3), batched=False)


@pytest.mark.parametrize("kind", STORAGE_KINDS)
def test_index_errors(kind, tmp_path):
    storage = lazy(kind, 10, tmp_path)
    storage.set(slice(0, 4), make_td(4))
    for bad in (4, -5, 10):
        with pytest.raises(IndexError, match=str(bad)):
            storage.get(bad)
    with pytest.raises(IndexError, match="valid indices are -4 .. 3"):
        storage.get(torch.tensor([0, 4]))
    with pytest.raises(IndexError, match="10"):
        storage.set(torch.tensor([3, 10]), make_td(2))
    with pytest.raises(IndexError, match="10"):
        storage.set(10, make_td(1)[0])
    with pytest.raises(IndexError, match="capacity 10"):
        storage.set(slice(8, 12), make_td(4))
    with pytest.raises(TypeError):
        storage.get(torch.tensor([True]))
    assert_same(storage.get(torch.tensor([-1, -4])), select(make_td(4), torch.tensor([3, 0])))
    assert len(storage) == 4


# -------------------------------------------------------------------- memmap


def test_memmap_lives_on_disk(tmp_path):
    storage = LazyMemmapStorage(1000, scratch_dir=tmp_path)
    storage.set(slice(0, 4), make_td(4))
    path = tmp_path / "packed.memmap"
    assert path.exists() and storage.filename == str(path)
    row_bytes = storage._layout.row_bytes
    assert row_bytes % 8 == 0 and os.path.getsize(path) == 1000 * row_bytes
    raw = torch.from_file(str(path), size=1000 * row_bytes, dtype=torch.uint8).view(1000, -1)
    assert torch.equal(raw[:4], storage._rows.packed[:4])
    with pytest.raises(RuntimeError, match="existsok"):
        LazyMemmapStorage(10, scratch_dir=tmp_path).set(0, make_td(1)[0])
    again = LazyMemmapStorage(10, scratch_dir=tmp_path, existsok=True)
    again.set(0, make_td(1)[0])
    assert os.path.getsize(path) == 10 * row_bytes


def test_memmap_temp_dir_and_pickle():
    storage = LazyMemmapStorage(16)
    storage.set(slice(0, 4), make_td(4))
    directory = storage.scratch_dir
    assert os.path.exists(os.path.join(directory, "packed.memmap"))
    clone = pickle.loads(pickle.dumps(storage))
    clone.set(0, make_td(1, offset=9)[0])
    assert storage[0]["obs"][0] == 9, "the unpickled storage maps the same file"
    del storage, clone
    gc.collect()
    assert not os.path.exists(directory)


# ----------------------------------------------------------------- state dict


def _save_load(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("kind", STORAGE_KINDS)
@pytest.mark.parametrize("data_kind", list(MAKERS))
def test_state_dict_round_trip(kind, data_kind, tmp_path):
    storage = lazy(kind, 12, tmp_path)
    data = MAKERS[data_kind](7)
    storage.set(slice(0, 7), data)
    state = _save_load(storage.state_dict())
    assert state["len"] == 7 and set(state["spec"]) == set(state["content"])
    fresh = LazyTensorStorage(12)
    fresh.load_state_dict(state)
    assert len(fresh) == 7 and fresh.has_tensordict_leaves == storage.has_tensordict_leaves
    assert_same(fresh[:], data)
    if data_kind == "pytree":
        out = fresh[:]
        assert isinstance(out["b"]["c"], tuple) and isinstance(out["b"]["c"][1], list)
        assert 30 in out
    target = lazy("memmap", 12, tmp_path / "other")
    target.load_state_dict(state)
    assert_same(target.get(torch.tensor([6, 1])), select(data, torch.tensor([6, 1])))
    empty_state = _save_load(LazyTensorStorage(3).state_dict())
    fresh.load_state_dict(empty_state)
    assert len(fresh) == 0


def test_state_dict_spec_mismatch_refused():
    storage = LazyTensorStorage(10)
    storage.set(slice(0, 5), make_td(5))
    before = _content(storage)
    other = LazyTensorStorage(10)
    bad = make_td(3)
    bad["obs"] = torch.zeros(3, 4)
    other.set(slice(0, 3), bad)
    with pytest.raises(ValueError, match="'obs'.*\\[4\\].*\\[3\\]"):
        storage.load_state_dict(other.state_dict())
    other = LazyTensorStorage(10)
    other.set(slice(0, 3), make_td(3).exclude("action"))
    with pytest.raises(ValueError, match="action"):
        storage.load_state_dict(other.state_dict())
    state = make_state = LazyTensorStorage(20)
    make_state.set(slice(0, 15), make_td(15))
    with pytest.raises(ValueError, match="len"):
        storage.load_state_dict(state.state_dict())
    broken = storage.state_dict()
    broken["content"]["obs"] = broken["content"]["obs"].double()
    with pytest.raises(ValueError, match="obs"):
        storage.load_state_dict(broken)
    assert len(storage) == 5
    after = _content(storage)
    assert all(torch.equal(before[k], after[k]) for k in before)
    small = LazyTensorStorage(3)
    with pytest.raises(ValueError, match="len"):
        small.load_state_dict(storage.state_dict())
    assert not small.initialized


# ---------------------------------------------------------------------- ndim


def test_ndim2_reference_example():
    data = torch.arange(12.0).reshape(3, 4)
    by_add = LazyTensorStorage(12, ndim=2)
    for i, column in enumerate(data.unbind(1)):
        by_add.set(i, column)
    by_extend = LazyTensorStorage(12, ndim=2)
    by_extend.set(slice(0, 4), data.movedim(1, 0))
    for storage in (by_add, by_extend):
        assert len(storage) == 12 and storage._max_size_along_dim0 == 4
        assert storage.shape == torch.Size([4, 3])
        assert torch.equal(storage[:], data)
        assert torch.equal(storage.get(torch.tensor([0, 1, 2, 11])), torch.tensor([0.0, 4, 8, 11]))
        assert torch.equal(storage[1:3], data[:, 1:3])
    small = LazyTensorStorage(10, ndim=2)
    small.set(slice(0, 3), data.movedim(1, 0)[:3])
    # ceil(10 / 3) = 4 items along dim 0, as torchrl (3 written so far)
    assert small._max_size_along_dim0 == 4 and len(small) == 9
    small.set(torch.tensor([2, 0]), data.movedim(1, 0)[2:4])
    assert torch.equal(small[:], data[:, [3, 1, 2]])
    with pytest.raises(ValueError, match="shape"):
        small.set(0, torch.zeros(4))


def test_ndim2_tensordict_state_round_trip():
    td = TensorDict({"obs": torch.arange(24.0).reshape(4, 3, 2)}, [4, 3])
    storage = LazyTensorStorage(12, ndim=2)
    storage.set(slice(0, 4), td)
    out = storage[:]
    assert out.batch_size == torch.Size([3, 4]) and torch.equal(out["obs"], td["obs"].movedim(0, 1))
    fresh = LazyTensorStorage(12, ndim=2)
    fresh.load_state_dict(_save_load(storage.state_dict()))
    assert torch.equal(fresh[:]["obs"], out["obs"])
    with pytest.raises(ValueError, match="ndim"):
        LazyTensorStorage(12).load_state_dict(storage.state_dict())


# ------------------------------------------------------------ multiprocessing


def _child(inbox, outbox) -> None:
    shared, memmap, unallocated = inbox.get(timeout=30)
    shared.set(slice(2, 5), TensorDict({"x": torch.full((3, 2), 7.0)}, [3]))
    memmap.set(slice(0, 2), TensorDict({"x": torch.full((2, 2), 5.0)}, [2]))
    unallocated.set(slice(0, 3), TensorDict({"x": torch.full((3, 2), 3.0)}, [3]))
    outbox.put("initialized")


def test_share_memory_with_child_process(tmp_path):
    shared = LazyTensorStorage(10)
    shared.share_memory_()
    shared.set(slice(0, 2), TensorDict({"x": torch.ones(2, 2)}, [2]))
    assert shared._rows.packed.is_shared()
    memmap = LazyMemmapStorage(10, scratch_dir=tmp_path)
    memmap.set(0, TensorDict({"x": torch.ones(2)}))
    memmap.share_memory_()
    assert memmap._rows.packed.data_ptr() == memmap._mmap.data_ptr(), "still the file"
    unallocated = LazyTensorStorage(10).share_memory_()
    # the storages travel through a queue, i.e. torch.multiprocessing's pickler
    ctx = mp.get_context("fork")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_child, args=(inbox, outbox))
    child.start()
    inbox.put((shared, memmap, unallocated))
    message = outbox.get(timeout=30)
    child.join(timeout=30)
    assert child.exitcode == 0
    assert len(shared) == 5 and shared[:]["x"][:, 0].tolist() == [1, 1, 7, 7, 7]
    assert len(memmap) == 2 and memmap[:]["x"][:, 0].tolist() == [5, 5]
    # shared before its first write: the child lays out the rows, the parent maps them
    assert message == "initialized" and unallocated.initialized and len(unallocated) == 3
    assert unallocated[:]["x"].tolist() == [[3.0, 3.0]] * 3


def test_shared_storage_shares_after_late_share_memory():
    storage = LazyTensorStorage(4)
    storage.set(slice(0, 2), torch.arange(2))
    storage.share_memory_()
    assert storage._rows.packed.is_shared() and len(storage) == 2
    storage.set(2, torch.tensor(5))
    assert storage[:].tolist() == [0, 1, 5]


# --------------------------------------------------------------- properties

CAPACITY = 7


@st.composite
def write_ops(draw):
    ops = []
    for _ in range(draw(st.integers(1, 12))):
        n = draw(st.integers(1, CAPACITY))
        start = draw(st.integers(0, CAPACITY - 1))
        mode = draw(st.sampled_from(["slice", "modulo", "scattered", "int"]))
        if mode == "slice":
            n = min(n, CAPACITY - start)
            index = slice(start, start + n)
        elif mode == "modulo":
            index = torch.arange(start, start + n) % CAPACITY
        elif mode == "scattered":
            perm = draw(st.permutations(list(range(CAPACITY))))
            index = torch.tensor(perm[:n])
        else:
            index, n = start, 1
        ops.append((index, n, draw(st.integers(0, 10_000))))
    return ops


@given(ops=write_ops(), kind=st.sampled_from(["tensordict", "dict"]))
def test_writes_match_dict_of_tensors_model(ops, kind):
    storage = LazyTensorStorage(CAPACITY)
    model = {
        "obs": torch.zeros(CAPACITY, 3),
        "flag": torch.zeros(CAPACITY, dtype=torch.bool),
        "id": torch.zeros(CAPACITY, dtype=torch.int64),
    }
    length = 0
    for index, n, seed in ops:
        ids = torch.arange(seed, seed + n)
        batch = {
            "obs": ids.float().unsqueeze(-1).expand(n, 3) + 0.5,
            "flag": ids % 3 == 0,
            "id": ids,
        }
        data = TensorDict(batch, [n]) if kind == "tensordict" else batch
        if isinstance(index, int):
            storage.set(index, select(data, 0))
            slots = torch.tensor([index])
        else:
            storage.set(index, data)
            slots = torch.arange(CAPACITY)[index]
        for key, value in batch.items():
            model[key][slots] = value
        length = max(length, int(slots.max()) + 1)
        assert len(storage) == length
    everything = storage[:]
    for key, value in model.items():
        assert torch.equal(everything[key], value[:length])
    probe = torch.randint(length, (5,))
    sample = storage.get(probe)
    for key, value in model.items():
        assert torch.equal(sample[key], value[probe])


def test_index_kinds_and_empty_writes():
    import numpy as np

    storage = LazyTensorStorage(6)
    storage.set([0, 1, 2], torch.arange(3) * 10)
    assert storage.get([2, 0]).tolist() == [20, 0]
    assert int(storage[np.int64(1)]) == 10 and int(storage[torch.tensor(2)]) == 20
    storage.set(torch.tensor([], dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert len(storage) == 3
    assert storage.get(torch.tensor([1], dtype=torch.int32)).tolist() == [10]
    with pytest.raises(TypeError, match="index"):
        storage.get("a")
    with pytest.raises(ValueError, match="1-D"):
        storage.set(torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, dtype=torch.long))


def test_tensor_storage_ndim2_and_lazy_stack_state():
    storage = TensorStorage(torch.arange(12).reshape(4, 3), ndim=2)
    assert storage.max_size == 12 and len(storage) == 12 and storage.shape == torch.Size([4, 3])
    assert torch.equal(storage[:], torch.arange(12).reshape(4, 3).T)
    stack = LazyStackStorage(4)
    stack.set(slice(0, 2), [TensorDict({"a": torch.zeros(1)}), TensorDict({"a": torch.ones(3)})])
    fresh = LazyStackStorage(4)
    fresh.load_state_dict(stack.state_dict())
    assert len(fresh) == 2 and fresh[1]["a"].shape == (3,)


# ------------------------------------------------------- packed row writes

ROW_DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.float16,
    torch.bfloat16,
    torch.int32,
    torch.float32,
    torch.int64,
    torch.float64,
    torch.complex64,
]
ITEM_SHAPES = st.one_of(
    st.just(()),
    st.tuples(st.integers(0, 5)),
    st.tuples(st.integers(1, 3), st.integers(0, 4)),
    st.tuples(st.integers(64, 72)),  # large leaves: written without staging
)


def random_bits(n: int, dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """``[n, *shape]`` of random bit patterns (NaN payloads included)."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n, *shape), generator=gen).bool()
    count = n * math.prod(shape) * dtype.itemsize
    return (
        torch.randint(0, 256, (count,), dtype=torch.uint8, generator=gen)
        .view(dtype)
        .view(n, *shape)
    )


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def padding_is_zero(storage: LazyTensorStorage) -> bool:
    layout = storage._rows.layout
    used = torch.zeros(layout.row_bytes, dtype=torch.bool)
    for offset, dtype, numel in zip(layout.offsets, layout.dtypes, layout.numels, strict=True):
        used[offset : offset + numel * dtype.itemsize] = True
    return not storage._rows.packed[:, ~used].any()


@given(
    specs=st.lists(st.tuples(st.sampled_from(ROW_DTYPES), ITEM_SHAPES), min_size=1, max_size=6),
    ops=write_ops(),
)
def test_rows_of_any_layout_are_bit_exact(specs, ops):
    storage = LazyTensorStorage(CAPACITY)
    model = {
        f"k{i}": torch.zeros(CAPACITY, *shape, dtype=dt) for i, (dt, shape) in enumerate(specs)
    }
    length = 0
    for index, n, seed in ops:
        data = TensorDict(
            {f"k{i}": random_bits(n, dt, shape, seed + i) for i, (dt, shape) in enumerate(specs)},
            [n],
        )
        if isinstance(index, int):
            storage.set(index, data[0])
            slots = torch.tensor([index])
        else:
            storage.set(index, data)
            slots = torch.arange(CAPACITY)[index]
        for key, value in data.items():
            model[key][slots] = value
        length = max(length, int(slots.max()) + 1)
    everything = storage[:]
    probe = torch.randint(length, (5,))
    sample = storage.get(probe)
    for key, value in model.items():
        assert torch.equal(bits(everything[key]), bits(value[:length])), key
        assert torch.equal(bits(sample[key]), bits(value[probe])), key
    assert padding_is_zero(storage)


def test_signaling_nan_bits_survive_every_write_path():
    n, pattern = 40, torch.tensor([0x7F800001, -8388607, 0x7FC00001, 1], dtype=torch.int32)
    words = pattern.repeat(n * 5)[: n * 17].view(n, 17)  # 68 bytes: written as words
    data = TensorDict(
        {
            "f": words[:, :3].view(torch.float32).clone(),
            "i": words.clone(),
            "b": torch.ones(n, 1) > 0,
        },
        [n],
    )
    for slots in (
        torch.arange(n),  # a range
        torch.arange(n, 2 * n).flip(0),  # scattered slots
        torch.arange(90, 90 + n) % 100,  # two runs at the wrap point
    ):
        storage = LazyTensorStorage(100)
        storage.set(slots, data)
        got = storage.get(slots)
        for key in ("f", "i", "b"):
            assert torch.equal(bits(got[key]), bits(data[key])), key


def test_large_and_repeated_batch_sizes():
    storage = LazyTensorStorage(50_000)
    for n in (20_000, 3, 20_000, 3):  # above and below the size whose staging is kept
        data = TensorDict(
            {"obs": torch.randn(n, 5), "done": torch.rand(n, 1) > 0.5, "a": torch.arange(n)}, [n]
        )
        storage.set(slice(0, n), data)
        assert_same(storage.get(torch.arange(n)), data)
    assert padding_is_zero(storage)


def test_concurrent_writers_of_one_storage():
    storage = LazyTensorStorage(64)
    storage.set(slice(0, 64), make_td(64))
    errors: list[BaseException] = []

    def writer(first: int) -> None:
        try:
            for round_ in range(200):
                offset = 1000 * first + round_
                storage.set(slice(first, first + 32), make_td(32, offset))
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(first,)) for first in (0, 32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert_same(storage[0:32], make_td(32, 199))
    assert_same(storage[32:64], make_td(32, 32199))


def test_gather_rejects_unfilled_slots_and_resolves_negative_ones():
    storage = LazyTensorStorage(10)
    storage.set(slice(0, 4), make_td(4))
    with pytest.raises(IndexError, match="valid indices are -4 .. 3"):
        storage.get(torch.tensor([1, 7]))  # allocated but never written
    storage.set(slice(4, 6), make_td(2, 4))
    assert_same(storage.get(torch.tensor([5, -6, 4])), select(make_td(6), torch.tensor([5, 0, 4])))
    with pytest.raises(IndexError, match="valid indices are -6 .. 5"):
        storage.get(torch.tensor([6]))


# ------------------------------------------------------------ recycled reads


def _filled_storage(n: int = 16) -> LazyTensorStorage:
    storage = LazyTensorStorage(n)
    storage.set(torch.arange(n), make_td(n))
    return storage


def _ptr(td: TensorDict) -> int:
    return td["obs"].untyped_storage().data_ptr()


def test_a_dropped_batch_memory_is_reused_by_the_next_read():
    storage = _filled_storage()
    first = storage.get(torch.tensor([1, 2, 3]))
    ptr = _ptr(first)
    del first
    second = storage.get(torch.tensor([4, 5, 6]))
    assert _ptr(second) == ptr
    assert second["obs"][:, 0].tolist() == [4.0, 5.0, 6.0]


@pytest.mark.parametrize("keep", ["batch", "leaf", "view", "numpy"])
def test_memory_still_referenced_is_never_reused(keep):
    storage = _filled_storage()
    batch = storage.get(torch.tensor([1, 2, 3]))
    held = {
        "batch": batch,
        "leaf": batch["next", "reward"],
        "view": batch["obs"][1:, 0],
        "numpy": batch["next", "pixels"].numpy(),
    }[keep]
    expected = torch.as_tensor(held).clone() if keep != "batch" else held.clone()
    ptr = _ptr(batch)
    del batch
    for start in range(0, 12, 3):
        other = storage.get(torch.arange(start, start + 3) + 4)
        assert _ptr(other) != ptr
    if keep == "batch":
        assert (held == expected).all()
    else:
        assert torch.equal(torch.as_tensor(held), expected)


def test_memory_moved_to_shared_memory_is_never_reused():
    storage = _filled_storage()
    batch = storage.get(torch.tensor([1, 2, 3]))
    batch["obs"].share_memory_()  # what sending a batch to another process does
    shared = batch["obs"].clone()
    ptr = _ptr(batch)
    view = batch["obs"]
    del batch
    other = storage.get(torch.tensor([7, 8, 9]))
    assert _ptr(other) != ptr
    del view
    for _ in range(3):
        assert _ptr(storage.get(torch.tensor([7, 8, 9]))) != ptr
    assert shared[:, 0].tolist() == [1.0, 2.0, 3.0]


@given(st.lists(st.tuples(st.integers(0, 15), st.integers(1, 5), st.booleans()), max_size=25))
def test_batches_a_user_keeps_never_change(reads):
    """Whatever is kept and dropped, in any order and batch size, kept batches stay intact."""
    storage = _filled_storage()
    kept: list[tuple[TensorDict, TensorDict]] = []
    for start, size, keep in reads:
        index = (torch.arange(size) + start) % 16
        batch = storage.get(index)
        assert batch["obs"][:, 0].tolist() == index.float().tolist()
        if keep:
            kept.append((batch, batch.clone()))
        del batch
        for batch, copy in kept:
            assert (batch == copy).all()


def test_batches_kept_for_good_leave_the_pool_after_one_miss():
    """A pool full of batches the user keeps forgets the oldest: reuse resumes after one miss."""
    storage = _filled_storage()
    kept = [storage.get(torch.arange(3) + i) for i in range(_MAX_BUFFERS)]
    copies = [batch.clone() for batch in kept]
    batch = storage.get(torch.tensor([1, 2, 3]))  # every pooled buffer is in use: a miss
    ptr, nbytes = _ptr(batch), batch["obs"].untyped_storage().nbytes()
    del batch
    blocker = torch.empty(nbytes, dtype=torch.uint8)  # memory freed now would go to this
    again = storage.get(torch.tensor([4, 5, 6]))
    assert _ptr(again) == ptr
    assert again["obs"][:, 0].tolist() == [4.0, 5.0, 6.0]
    assert blocker.data_ptr() != ptr
    for batch, copy in zip(kept, copies, strict=True):
        assert (batch == copy).all()


_LEAF_EDITS = {
    "keep batch": None,
    "keep leaf": None,
    "add_": lambda leaf: leaf.add_(1) if leaf.dtype != torch.bool else leaf.logical_not_(),
    "unsqueeze_": lambda leaf: leaf.unsqueeze_(0),
    "t_": lambda leaf: leaf.t_() if leaf.ndim == 2 else leaf.unsqueeze_(-1),
    "requires_grad_": lambda leaf: leaf.requires_grad_() if leaf.is_floating_point() else None,
    "grad =": lambda leaf: (
        setattr(leaf, "grad", torch.ones_like(leaf)) if leaf.is_floating_point() else None
    ),
    "resize_": lambda leaf: leaf.resize_(1),
    "new key": None,
    "drop": None,
}
_LEAF_KEYS = [("obs",), ("action",), ("next", "reward"), ("next", "done"), ("next", "pixels")]


def _same_layout(batch: TensorDict, fresh: TensorDict) -> bool:
    """Every leaf has the shape, strides, grad state and values of a batch read without reuse."""
    for key in _LEAF_KEYS:
        got, want = batch.get(key), fresh.get(key)
        if got.shape != want.shape or got.requires_grad or got.grad is not None:
            return False
        if got.stride()[1:] != want.stride()[1:] or not torch.equal(got, want):
            return False
    return set(batch.keys(True, True)) == set(fresh.keys(True, True))


@given(
    st.lists(
        st.tuples(
            st.integers(0, 15),
            st.sampled_from([3, 5]),
            st.sampled_from(sorted(_LEAF_EDITS)),
            st.sampled_from(range(len(_LEAF_KEYS))),
        ),
        max_size=25,
    )
)
def test_leaves_of_recycled_batches_are_fresh_whatever_was_done_to_the_last(reads):
    """Each batch's leaves are aliases of views only the pool holds: whatever a user did to a
    dropped batch's leaves (in place, to their data, shape, strides or grad state, or to the
    TensorDict), the next batches read the same rows as a copy would, with the same layout;
    kept batches and leaves never change, and the storage never changes."""
    storage = _filled_storage()
    reference = storage[:].clone()
    kept: list[tuple[object, object]] = []
    for start, size, edit, leaf_at in reads:
        index = (torch.arange(size) + start) % 16
        batch = storage.get(index)
        assert _same_layout(batch, reference[index])
        key = _LEAF_KEYS[leaf_at]
        leaf = batch.get(key)
        if edit == "keep batch":
            kept.append((batch, batch.clone()))
        elif edit == "keep leaf":
            kept.append((leaf, leaf.clone()))
        elif edit == "new key":
            batch.set("extra", torch.zeros(size))
        elif edit == "drop":
            batch.del_(key)
        else:
            _LEAF_EDITS[edit](leaf)  # type: ignore[misc]
        del batch, leaf
        for held, copy in kept:
            assert (held == copy).all()
    assert (storage[:] == reference).all()

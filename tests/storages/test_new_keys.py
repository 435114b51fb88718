"""A write carrying keys a tensor storage lacks: it adds them (as torchrl's LazyTensorStorage).

The rows not written read zeros in the new entries, the written rows what was
given, and every later read shows the new keys. A storage whose rows other
processes map refuses (``KeyError``), and a write that fails changes nothing.
"""

from __future__ import annotations

import copy
import logging
import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import (
    LazyMemmapStorage,
    LazyTensorStorage,
    RandomSampler,
    ReplayBuffer,
    TensorDictReplayBuffer,
    TensorStorage,
)
from rbdata.storages import Storage


def make(kind: str, size: int, tmp_path: Path, ndim: int = 1) -> Storage:
    if kind == "lazy":
        return LazyTensorStorage(size, ndim=ndim)
    if kind == "memmap":
        return LazyMemmapStorage(size, ndim=ndim, scratch_dir=tmp_path / "rows")
    data = TensorDict({"a": torch.zeros(size), "b": {"c": torch.zeros(size, 2)}}, [size])
    return TensorStorage(data)


def batch(n: int, start: float = 1.0, **extra: torch.Tensor) -> TensorDict:
    a = torch.arange(start, start + n)
    td = TensorDict({"a": a, "b": {"c": a.unsqueeze(-1).expand(n, 2).clone()}}, [n])
    for key, value in extra.items():
        td.set(tuple(key.split(".")) if "." in key else key, value)
    return td


KINDS = ["lazy", "memmap", "tensor"]


@pytest.mark.parametrize("kind", KINDS)
def test_extend_adds_a_key_the_other_rows_read_zeros(kind: str, tmp_path: Path) -> None:
    rb = TensorDictReplayBuffer(storage=make(kind, 10, tmp_path), batch_size=4)
    rb.extend(batch(4))
    rb.extend(batch(3, 10.0, d=torch.full((3, 2), 5.0)))
    stored = rb[:]
    assert stored["d"].shape == (len(rb), 2)
    assert stored["d"][4:7].eq(5.0).all()
    assert not stored["d"][:4].any() and not stored["d"][7:].any()
    assert stored["a"][:7].tolist() == [1.0, 2.0, 3.0, 4.0, 10.0, 11.0, 12.0]
    assert "d" in rb.sample().keys() and "d" in rb[5].keys()
    assert "d" in rb.storage.leaf_keys()
    assert "d" in rb.storage.state_dict()["content"]


@pytest.mark.parametrize("kind", KINDS)
def test_setitem_adds_nested_keys_in_place(kind: str, tmp_path: Path) -> None:
    """torchrl's test_storage_inplace_writing_newkey, nested keys and a new sub-TensorDict too."""
    rb = ReplayBuffer(storage=make(kind, 10, tmp_path))
    rb.extend(batch(6))
    new = batch(1, 50.0).set(("b", "e"), torch.ones(1, dtype=torch.int32))
    new.set(("f", "g"), torch.full((1, 3), 7, dtype=torch.uint8))
    rb[3:4] = new
    assert ("b", "e") in rb[3].keys(True) and ("f", "g") in rb[3:5].keys(True)
    assert rb[:]["b", "e"][:6].tolist() == [0, 0, 0, 1, 0, 0]
    assert rb[:]["f", "g"][3].tolist() == [7, 7, 7] and not rb[:]["f", "g"][4].any()
    assert rb[:]["a"][:6].tolist() == [1.0, 2.0, 3.0, 50.0, 5.0, 6.0]


def test_a_two_dim_storage_adds_whole_cells() -> None:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(12, ndim=2))  # extends along dim 1
    rb.extend(batch(8).reshape(2, 4))
    rb.extend(batch(4, 20.0, v=torch.arange(4)).reshape(2, 2))
    stored = rb.storage._storage  # [items, cells]
    assert stored.batch_size == torch.Size([6, 2])
    assert not stored["v"][:4].any() and stored["v"][4:].tolist() == [[0, 2], [1, 3]]
    data = rb.read_all_in_order()
    data["w"] = data["a"] + 1
    rb.write_all(data)
    assert torch.equal(rb.read_all_in_order()["w"], data["w"])


def test_a_memmap_storage_keeps_one_rows_file(tmp_path: Path) -> None:
    storage = LazyMemmapStorage(10, scratch_dir=tmp_path)
    rb = ReplayBuffer(storage=storage)
    rb.extend(batch(4))
    filename, before = storage.filename, storage.memory_stats()["capacity_bytes"]
    rb.extend(batch(2, d=torch.ones(2, 4, dtype=torch.float64)))
    assert os.listdir(tmp_path) == ["packed.memmap"] and storage.filename == filename
    after = storage.memory_stats()["capacity_bytes"]
    assert after > before and os.path.getsize(filename) == after
    assert rb[:]["d"][4:].eq(1.0).all() and rb[:]["a"].tolist() == [1, 2, 3, 4, 1, 2]
    other = LazyMemmapStorage(10, scratch_dir=tmp_path / "again")
    other.load_state_dict(storage.state_dict())
    assert torch.equal(other[:]["d"], storage[:]["d"])


@pytest.mark.parametrize("kind", ["lazy", "memmap"])
def test_a_failed_write_changes_nothing(kind: str, tmp_path: Path) -> None:
    storage = make(kind, 10, tmp_path)
    storage.set(slice(0, 4), batch(4))
    before = {k: v.clone() for k, v in storage.state_dict()["content"].items()}
    with pytest.raises(ValueError, match="index selects 3"):  # laid out anew, then undone
        storage.set(slice(0, 3), batch(2, d=torch.ones(2)))
    with pytest.raises(TypeError, match="'a'"):  # checked before anything is laid out
        storage.set(
            slice(0, 2), batch(2, d=torch.ones(2)).set("a", torch.zeros(2, dtype=torch.int64))
        )
    assert "d" not in storage.leaf_keys() and len(storage) == 4
    after = storage.state_dict()["content"]
    assert after.keys() == before.keys() and all(torch.equal(before[k], after[k]) for k in before)
    if kind == "memmap":
        assert os.listdir(tmp_path / "rows") == ["packed.memmap"]
    storage.set(slice(4, 6), batch(2, d=torch.ones(2)))  # and it still takes the key
    assert storage[:]["d"].tolist() == [0, 0, 0, 0, 1, 1]


def test_a_dict_pytree_takes_no_new_key() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend({"a": torch.zeros(3)})
    with pytest.raises(KeyError, match=r"extra \['z'\]"):
        rb.extend({"a": torch.zeros(3), "z": torch.zeros(3)})
    assert len(rb) == 3


@pytest.mark.parametrize(
    "build",
    [
        lambda tmp: TensorDictReplayBuffer(storage=LazyTensorStorage(10), shared=True),
        lambda tmp: TensorDictReplayBuffer(storage=LazyMemmapStorage(10), shared=True),
        lambda tmp: TensorDictReplayBuffer(storage=LazyTensorStorage(10, shared_init=True)),
        lambda tmp: TensorDictReplayBuffer(
            storage=LazyMemmapStorage(10, scratch_dir=tmp, shared_init=True)
        ),
    ],
    ids=["shared", "shared_memmap", "shared_init", "shared_init_memmap"],
)
def test_a_storage_other_processes_map_refuses_new_keys(build, tmp_path: Path) -> None:
    rb = build(tmp_path)
    rb.extend(batch(4))
    with pytest.raises(KeyError, match=r"\['d'\].*other processes map its rows"):
        rb.extend(batch(2, d=torch.ones(2)))
    with pytest.raises(KeyError, match=r"\['d'\]"):
        rb[0:1] = batch(1, d=torch.ones(1))
    assert len(rb) == 4 and "d" not in rb.storage.leaf_keys()


def test_shared_after_the_first_write_refuses_too() -> None:
    storage = LazyTensorStorage(10)
    storage.set(slice(0, 2), batch(2))
    storage.share_memory_()
    with pytest.raises(KeyError, match="other processes map its rows"):
        storage.set(slice(2, 4), batch(2, d=torch.ones(2)))


def test_a_pickled_memmap_storage_refuses_its_copy_maps_the_file(tmp_path: Path) -> None:
    storage = LazyMemmapStorage(10, scratch_dir=tmp_path)
    storage.set(slice(0, 2), batch(2))
    copied = pickle.loads(pickle.dumps(storage))
    for s in (storage, copied):
        with pytest.raises(KeyError, match="other processes map its rows"):
            s.set(slice(2, 4), batch(2, d=torch.ones(2)))


def test_an_in_memory_storage_pickled_or_copied_still_grows() -> None:
    storage = LazyTensorStorage(10)
    storage.set(slice(0, 2), batch(2))
    for s in (pickle.loads(pickle.dumps(storage)), copy.deepcopy(storage), storage):
        s.set(slice(2, 4), batch(2, d=torch.ones(2)))
        assert s[:]["d"].tolist() == [0.0, 0.0, 1.0, 1.0]
    grown = pickle.loads(pickle.dumps(storage))
    assert torch.equal(grown[:]["d"], storage[:]["d"])


def test_the_relayout_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(batch(3))
    with caplog.at_level(logging.INFO, logger="rbdata.storages.tensor"):
        rb.extend(batch(1, d=torch.ones(1)))
    assert any(
        "adds key(s) ['d']" in r.getMessage() and "3 filled" in r.getMessage()
        for r in caplog.records
    )


def test_a_later_batch_lacking_the_new_key_warns_and_writes_zeros() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(batch(2))
    rb.extend(batch(2, d=torch.ones(2)))
    with pytest.warns(UserWarning, match=r"lacks stored key\(s\) \['d'\]"):
        rb.extend(batch(2))
    assert rb[:]["d"].tolist() == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]


def test_dumps_and_loads_round_trip_after_a_new_key(tmp_path: Path) -> None:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), sampler=RandomSampler())
    rb.extend(batch(3))
    rb.extend(batch(2, d=torch.ones(2, 3)))
    rb.dumps(tmp_path / "dump")
    other = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    other.loads(tmp_path / "dump")
    assert (len(other), other.write_count) == (5, 5)
    assert torch.equal(other[:]["d"], rb[:]["d"]) and torch.equal(other[:]["a"], rb[:]["a"])


def test_samples_and_stats_follow_the_new_layout() -> None:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=8)
    rb.extend(batch(50))
    rb.sample()  # a gather pool for the old row size
    before = rb.stats()["capacity_bytes"]
    rb.extend(batch(10, 100.0, d=torch.ones(10, 16)))
    for _ in range(3):
        sample = rb.sample()
        picked = sample["index"]
        assert torch.equal(sample["d"], (picked >= 50).float().unsqueeze(-1).expand(8, 16))
    assert rb.stats()["capacity_bytes"] > before


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    writes=st.lists(
        st.tuples(st.integers(1, 5), st.sets(st.sampled_from(["x", "y", "z"]))),
        min_size=1,
        max_size=6,
    ),
    kind=st.sampled_from(["lazy", "memmap"]),
)
def test_reads_match_a_model_of_added_and_missing_keys(writes, kind) -> None:
    """Every stored key reads what each row's write gave, zeros where that write lacked it."""
    size = 12
    storage = LazyMemmapStorage(size) if kind == "memmap" else LazyTensorStorage(size)
    rb = ReplayBuffer(storage=storage)
    model: list[dict[str, float]] = [{} for _ in range(size)]
    keys: set[str] = {"a"}
    count = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n, extra in writes:
            values = {
                k: torch.arange(n, dtype=torch.float32) + 100 * count + i
                for i, k in enumerate(["a", *sorted(extra)])
            }
            rb.extend(TensorDict(values, [n]))
            keys |= extra
            for j in range(n):
                model[(count + j) % size] = {k: float(v[j]) for k, v in values.items()}
            count += n
    stored = rb[:]
    assert set(stored.keys()) == keys
    for row in range(len(rb)):
        for key in keys:
            assert float(stored[key][row]) == model[row].get(key, 0.0), (row, key)

"""Storage checkpointers: torchrl 0.14.1's classes, their layouts and how storages use them."""

from __future__ import annotations

import json

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    CompressedListStorage,
    CompressedListStorageCheckpointer,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ListStorageCheckpointer,
    ReplayBuffer,
    StorageCheckpointerBase,
    TensorDictReplayBuffer,
    TensorStorageCheckpointer,
)


def test_default_checkpointers_are_torchrl_s_kinds():
    assert type(LazyTensorStorage(3).checkpointer) is TensorStorageCheckpointer
    assert type(LazyMemmapStorage(3).checkpointer) is TensorStorageCheckpointer
    assert type(ListStorage(3).checkpointer) is ListStorageCheckpointer
    assert type(CompressedListStorage(3).checkpointer) is CompressedListStorageCheckpointer


def test_without_a_checkpointer_dumps_keep_rbdata_s_format(tmp_path):
    storage = ListStorage(4)
    storage.set(torch.arange(2), [1, 2])
    storage.dumps(tmp_path)  # torchrl's ListStorageCheckpointer would refuse
    copy = ListStorage(4)
    copy.loads(tmp_path)
    assert len(copy) == 2


def test_a_list_storage_checkpointer_refuses_as_torchrl(tmp_path):
    storage = ListStorage(4)
    storage.checkpointer = ListStorageCheckpointer()
    for call in (storage.dumps, storage.dump, storage.save, storage.loads, storage.load):
        with pytest.raises(NotImplementedError, match="doesn't support serialization"):
            call(tmp_path)


def test_checkpointer_type_is_checked():
    with pytest.raises(TypeError, match="checkpointer"):
        LazyTensorStorage(3).checkpointer = "flat"
    with pytest.raises(TypeError, match="checkpointer"):
        ReplayBuffer(storage=LazyTensorStorage(3), checkpointer=object())


def _td(n: int, start: int = 0) -> TensorDict:
    return TensorDict(
        {
            "obs": torch.arange(start, start + n, dtype=torch.float32),
            ("next", "r"): torch.ones(n, 1),
        },
        batch_size=[n],
    )


@pytest.mark.parametrize("storage_cls", [LazyTensorStorage, LazyMemmapStorage])
def test_tensor_checkpointer_writes_torchrl_s_layout(tmp_path, storage_cls):
    rb = TensorDictReplayBuffer(storage=storage_cls(10), checkpointer=TensorStorageCheckpointer())
    rb.extend(_td(12))  # wraps: slots 0, 1 hold items 10, 11
    rb.storage.dumps(tmp_path)
    meta = json.loads((tmp_path / "storage_metadata.json").read_text())
    assert meta == {"metadata": {}, "is_pytree": False, "len": 10}
    saved = TensorDict.load_memmap(tmp_path)
    assert saved.batch_size == torch.Size([10]) and saved["obs"][:2].tolist() == [10.0, 11.0]
    copy = storage_cls(10)
    copy.checkpointer = TensorStorageCheckpointer()
    copy.load(tmp_path)
    assert len(copy) == 10
    assert (
        copy.get(torch.arange(10))["obs"].tolist()
        == rb.storage.get(torch.arange(10))["obs"].tolist()
    )


def test_tensor_checkpointer_pads_unwritten_rows_and_reads_tensors(tmp_path):
    storage = LazyTensorStorage(6)
    storage.checkpointer = TensorStorageCheckpointer()
    storage.set(torch.arange(2), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    storage.save(tmp_path)
    meta = json.loads((tmp_path / "storage_metadata.json").read_text())
    assert meta["is_pytree"] and meta["len"] == 2
    assert meta["metadata"]["_-single-tensor-_"] == {"shape": [6, 2], "dtype": "torch.float32"}
    copy = LazyTensorStorage(6)
    copy.checkpointer = TensorStorageCheckpointer()
    copy.loads(tmp_path)
    assert len(copy) == 2 and copy.get(torch.arange(2)).tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_tensor_checkpointer_refusals(tmp_path):
    lazy = LazyTensorStorage(4)
    lazy.checkpointer = TensorStorageCheckpointer()
    with pytest.raises(RuntimeError, match="non-initialized"):
        lazy.dumps(tmp_path)
    grid = LazyTensorStorage(8, ndim=2)
    grid.checkpointer = TensorStorageCheckpointer()
    grid.set(torch.arange(2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="ndim"):
        grid.dumps(tmp_path)
    with pytest.raises(FileNotFoundError):
        lazy.loads(tmp_path / "nothing")


def test_tensor_checkpointer_hooks_are_called_as_torchrl_calls_them(tmp_path):
    calls = []

    class Hook:
        is_full = None
        shift = None

        def __call__(self, data, path=None):
            calls.append((self.is_full, self.shift, path))
            return data

    def on_load(data, out=None):
        calls.append(("load", out))
        return data

    storage = LazyTensorStorage(4)
    storage.checkpointer = TensorStorageCheckpointer()
    rb = TensorDictReplayBuffer(storage=storage)
    rb.register_save_hook(Hook())  # forwarded to the checkpointer, as torchrl's storage does
    storage.register_load_hook(on_load)
    rb.extend(_td(6))
    storage.dumps(tmp_path)
    storage.loads(tmp_path)
    assert calls == [(True, 2, tmp_path), ("load", None)]
    assert storage.get(torch.arange(4))["obs"].tolist() == [4.0, 5.0, 2.0, 3.0]


def test_load_hooks_are_refused_for_tensor_items(tmp_path):
    storage = LazyTensorStorage(4)
    storage.checkpointer = TensorStorageCheckpointer()
    storage.set(torch.arange(2), torch.ones(2))
    storage.dumps(tmp_path)
    storage.register_load_hook(lambda data, out=None: data)
    with pytest.raises(RuntimeError, match="PyTree"):
        storage.loads(tmp_path)
    assert len(storage) == 2  # unchanged


def test_compressed_list_checkpointer_round_trip(tmp_path):
    storage = CompressedListStorage(8)
    storage.checkpointer = CompressedListStorageCheckpointer()
    with pytest.raises(RuntimeError, match="empty"):
        storage.dumps(tmp_path)
    storage.set(torch.arange(2), torch.stack([torch.zeros(64), torch.ones(64)]))
    storage.dumps(tmp_path)
    copy = CompressedListStorage(8)
    copy.checkpointer = CompressedListStorageCheckpointer()
    copy.loads(tmp_path)
    assert len(copy) == 2 and float(copy[1].sum()) == 64.0


def test_base_checkpointer_is_abstract(tmp_path):
    base = StorageCheckpointerBase()
    with pytest.raises(NotImplementedError):
        base.dumps(LazyTensorStorage(2), tmp_path)
    with pytest.raises(TypeError, match="callable"):
        base.register_save_hook(3)


def test_a_load_that_does_not_fit_changes_nothing(tmp_path):
    storage = LazyTensorStorage(4)
    storage.checkpointer = TensorStorageCheckpointer()
    storage.set(torch.arange(2), torch.ones(2, 3))
    storage.dumps(tmp_path)
    other = LazyTensorStorage(4)
    other.checkpointer = TensorStorageCheckpointer()
    other.set(torch.arange(3), torch.zeros(3, 5, dtype=torch.long))
    with pytest.raises((TypeError, ValueError)):
        other.loads(tmp_path)
    assert len(other) == 3 and other.get(torch.arange(3)).shape == torch.Size([3, 5])


# ------------------------------------------------------------------ TED layouts
from rbdata import (  # noqa: E402
    Flat2TED,
    FlatStorageCheckpointer,
    H5Combine,
    H5Split,
    H5StorageCheckpointer,
    Nested2TED,
    NestedStorageCheckpointer,
    TED2Flat,
    TED2Nested,
)


def _steps(start: int, n: int, ends: set[int]) -> TensorDict:
    obs = torch.arange(start, start + n, dtype=torch.float32)
    done = torch.tensor([int(o) in ends for o in obs])[:, None]
    return TensorDict(
        {
            "obs": obs[:, None].expand(n, 2).clone(),
            "action": obs.long(),
            "done": torch.zeros(n, 1, dtype=torch.bool),
            "next": {
                "obs": (obs + 1)[:, None].expand(n, 2).clone(),
                "done": done,
                "reward": obs[:, None],
            },
        },
        batch_size=[n],
    )


CHECKPOINTERS = [FlatStorageCheckpointer, NestedStorageCheckpointer, H5StorageCheckpointer]
FILLS = [[(0, 4, {2})], [(0, 12, {3, 7})], [(0, 7, {6}), (7, 9, {9, 12})], [(0, 8, {7})]]


@pytest.mark.parametrize("checkpointer", CHECKPOINTERS)
@pytest.mark.parametrize("fills", FILLS)
@pytest.mark.parametrize("storage_cls", [LazyTensorStorage, LazyMemmapStorage])
def test_ted_checkpointers_round_trip(tmp_path, checkpointer, fills, storage_cls):
    size = 8 if fills == FILLS[-1] else 10
    rb = ReplayBuffer(storage=storage_cls(size), checkpointer=checkpointer())
    for start, n, ends in fills:
        rb.extend(_steps(start, n, ends))
    rb.storage.dumps(tmp_path)
    copy = storage_cls(size)
    copy.checkpointer = checkpointer()
    copy.loads(tmp_path)
    n = len(rb.storage)
    assert len(copy) == n
    assert (copy.get(torch.arange(n)) == rb.storage.get(torch.arange(n))).all()
    # loading into the same storage again (initialized): same rows
    copy.loads(tmp_path)
    assert (copy.get(torch.arange(n)) == rb.storage.get(torch.arange(n))).all()


def test_flat_form_stores_each_observation_once():
    to_flat = TED2Flat()
    to_flat.shift, to_flat.is_full = 2, True
    # a full ring of 4 whose oldest slot is 2: obs 0, 1 | 2 | 3 in write order
    steps = _steps(0, 4, {0})
    steps = steps[torch.tensor([2, 3, 0, 1])]  # slot order of a ring written from step 2
    steps["next", "done"][:] = torch.tensor([[True], [False], [False], [True]])
    flat = to_flat(steps)
    assert flat["obs"][:, 0].tolist() == [0, 1, 2, 2, 3, 3, 4]  # each ends with its next obs
    assert flat.get_non_tensor("shift") == 2 and flat.get_non_tensor("is_full") is True
    assert flat["reward"].shape == torch.Size([4, 1]) and "next" not in flat.keys()
    back = Flat2TED()(flat)
    for key in (("next", "obs"), "obs", "action", ("next", "done"), ("next", "reward")):
        assert torch.equal(back[key], steps[key]), key
    assert not back["done"].any()  # root done flags are rebuilt as False


def test_nested_and_h5_forms():
    to_nested = TED2Nested()
    to_nested.shift, to_nested.is_full = 5, False
    written = _steps(0, 5, {1})
    nested = to_nested(torch.cat([written, torch.zeros_like(written)]))  # 5 of 10 slots written
    lengths = [t.shape[0] for t in nested["action"].unbind(0)]
    obs_lengths = [t.shape[0] for t in nested["obs"].unbind(0)]
    assert lengths == [2, 3, 5] and obs_lengths == [3, 4, 5]  # the unwritten tail: no next
    groups = H5Split()(nested)
    assert sorted(k for k in groups.keys() if k.startswith("traj")) == [
        "traj_0",
        "traj_1",
        "traj_2",
    ]
    again = H5Combine()(groups)
    assert [t.shape[0] for t in again["obs"].unbind(0)] == obs_lengths
    assert torch.equal(Nested2TED()(again)["obs"], Nested2TED()(nested)["obs"])


def test_converters_refuse_what_they_cannot_convert():
    with pytest.raises(RuntimeError, match="shift"):
        TED2Flat()(_steps(0, 3, {2}))  # no checkpointer set shift / is_full
    to_flat = TED2Flat()
    to_flat.shift, to_flat.is_full = 1, False
    with pytest.raises(TypeError):
        to_flat(torch.zeros(3))
    with pytest.raises(TypeError):
        TED2Flat(done_keys="done")


def test_pickled_entries_are_refused(tmp_path):
    storage = LazyTensorStorage(4)
    storage.checkpointer = TensorStorageCheckpointer()
    storage.set(torch.arange(2), _steps(0, 2, {1}))
    storage.dumps(tmp_path)
    (tmp_path / "obs_extra").mkdir()
    (tmp_path / "obs_extra" / "pickle.pkl").write_bytes(b"not read")
    with pytest.raises(ValueError, match="unpickle"):
        storage.loads(tmp_path)
    assert len(storage) == 2


def test_h5_checkpointer_file_name(tmp_path):
    storage = LazyTensorStorage(4)
    storage.checkpointer = H5StorageCheckpointer(checkpoint_file="rows.h5")
    storage.set(torch.arange(3), _steps(0, 3, {1}))
    storage.dumps(tmp_path / "dir")
    assert (tmp_path / "dir" / "rows.h5").is_file()
    storage.dumps(tmp_path / "direct.h5")
    copy = LazyTensorStorage(4)
    copy.checkpointer = H5StorageCheckpointer()
    copy.loads(tmp_path / "direct.h5")
    assert len(copy) == 3


def test_ted_flat_defaults_to_the_one_done_keys_constant() -> None:
    import inspect

    from rbdata import DEFAULT_DONE_KEYS
    from rbdata.storages.checkpointers.ted_flat import Flat2TED, TED2Flat

    for cls in (TED2Flat, Flat2TED):
        default = inspect.signature(cls).parameters["done_keys"].default
        assert default is DEFAULT_DONE_KEYS  # one source, not a copy that may drift

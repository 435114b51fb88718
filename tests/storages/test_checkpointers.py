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

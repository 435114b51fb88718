"""What every storage declares, so that callers ask members instead of probing attributes."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rbdata.storages import (
    FrameDedupStorage,
    LazyTensorStorage,
    ListStorage,
    Storage,
)
from rbdata.storages._base import shape_of
from rbdata.trajectories.reading import read_leaf, storage_keys


def test_a_storage_of_objects_says_it_holds_no_leaves_and_no_device() -> None:
    storage = ListStorage(5)
    assert storage.device is None and storage.ndim == 1
    assert storage.shape == torch.Size([5]) and shape_of(storage) == (5,)
    assert not storage.has_tensordict_leaves and storage.leaf_keys() == []
    with pytest.raises(NotImplementedError, match="not laid out in leaves"):
        storage.get_leaf("obs")
    assert not storage.reads_own_memory(torch.zeros(3))


def test_a_list_storage_device_is_a_checked_setting() -> None:
    storage = ListStorage(5, device="cpu")
    assert storage.device == torch.device("cpu")
    storage.device = None
    storage.set(0, torch.ones(2))
    assert storage.device is None and torch.equal(storage[0], torch.ones(2))


def test_a_tensor_storage_declares_its_leaves_once_laid_out() -> None:
    storage = LazyTensorStorage(4)
    assert not storage.has_tensordict_leaves and storage.leaf_keys() == []
    storage.set(slice(0, 2), TensorDict({"obs": torch.arange(2)}, [2]))
    assert storage.has_tensordict_leaves and storage.leaf_keys() == ["obs"]
    assert storage_keys(storage) == {"obs"}
    assert read_leaf(storage, "obs", torch.tensor([1])).tolist() == [1]
    assert storage.reads_own_memory(storage[:]) is False  # get returns copies
    own = TensorDict({"obs": storage.get_leaf("obs")}, [4])
    assert storage.reads_own_memory(own)
    tensors = LazyTensorStorage(4)
    tensors.set(slice(0, 2), torch.arange(2))
    assert not tensors.has_tensordict_leaves  # leaves, but not of TensorDicts


def test_leaf_reads_of_a_list_storage_go_through_its_items() -> None:
    storage = ListStorage(4)
    storage.set(slice(0, 2), [TensorDict({"obs": torch.tensor(i)}, []) for i in range(2)])
    assert storage_keys(storage) == {"obs"}
    assert read_leaf(storage, "obs", torch.tensor([1, 0])).tolist() == [1, 0]


def test_frame_dedup_storage_holds_tensordict_leaves() -> None:
    assert FrameDedupStorage(4).has_tensordict_leaves


def test_random_slots_draw_among_filled_cells_under_either_name() -> None:
    storage = LazyTensorStorage(10)
    storage.set(slice(0, 3), torch.arange(3))
    drawn = storage.random_slots(100, torch.Generator().manual_seed(0))
    assert drawn.shape == (100,) and set(drawn.tolist()) <= {0, 1, 2}
    legacy = storage._rand_given_ndim(100, torch.Generator().manual_seed(0))
    assert torch.equal(drawn, legacy)  # torchrl's name for the same draw


def test_the_declared_members_are_on_the_base() -> None:
    for name in ("device", "shape", "has_tensordict_leaves", "ndim"):
        assert name in dir(Storage)
    for name in ("leaf_keys", "get_leaf", "reads_own_memory", "random_slots"):
        assert callable(getattr(Storage, name))


@pytest.mark.parametrize("make", ["list", "lazy", "compressed"])
def test_contains_says_which_slots_hold_an_item(make: str) -> None:
    from rbdata import CompressedListStorage, LazyTensorStorage, ListStorage

    storage = {"list": ListStorage, "lazy": LazyTensorStorage, "compressed": CompressedListStorage}[
        make
    ](10)
    storage.set(torch.arange(3), torch.zeros(3, 2) if make != "list" else [0, 1, 2])
    assert storage.contains(0) and storage.contains(2) and storage.contains(-3)
    assert not storage.contains(3) and not storage.contains(-4)
    assert storage.contains(torch.tensor([[0, 3], [2, 9]])).tolist() == [
        [True, False],
        [True, False],
    ]
    with pytest.raises(TypeError, match="item must be an int"):
        storage.contains(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="item must hold integers"):
        storage.contains(torch.tensor([0.0]))


def test_a_compressed_storage_slot_never_written_is_not_contained() -> None:
    from rbdata import CompressedListStorage

    storage = CompressedListStorage(10)
    storage.set(2, torch.zeros(3))  # slots 0 and 1 are below the length but empty
    assert [storage.contains(i) for i in range(4)] == [False, False, True, False]

"""Reading per-transition entries from a storage of TensorDict items."""

from __future__ import annotations

from typing import Any, Protocol

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey, normalize_key
from rbdata.storages import Storage

__all__ = ["LeafSource", "get_items", "read_leaf", "storage_keys"]


class LeafSource(Protocol):
    """Rows whose entries are read by key, like a storage's leaves (a TensorDict's rows)."""

    def get_leaf(self, key: NestedKey) -> torch.Tensor:
        """The entry ``key`` of every row."""


def storage_keys(storage: Storage) -> set[NestedKey]:
    """The nested keys of the items held by ``storage`` (a TensorDict layout is required)."""
    if storage.has_tensordict_leaves:
        return {normalize_key(k) for k in storage.leaf_keys()}
    item = get_items(storage, torch.zeros(1, dtype=torch.long)) if len(storage) else None
    if isinstance(item, TensorDictBase):
        return {normalize_key(k) for k in item.keys(True, True)}
    raise TypeError(
        f"trajectories need TensorDict items with per-transition entries, but "
        f"{type(storage).__name__} holds {type(item).__name__}."
    )


def get_items(storage: Storage, slots: torch.Tensor) -> Any:
    """The items at ``slots``, stacked when the storage returns a list of TensorDicts."""
    data = storage.get(slots)
    if isinstance(data, list) and data and all(isinstance(d, TensorDictBase) for d in data):
        return torch.stack(data)
    return data


def read_leaf(storage: Storage | LeafSource, key: NestedKey, slots: torch.Tensor) -> torch.Tensor:
    """Read the entry ``key`` of the items at ``slots`` (a 1-D LongTensor)."""
    if not isinstance(storage, Storage) or storage.has_tensordict_leaves:
        leaf: torch.Tensor = storage.get_leaf(key)
        return leaf.index_select(0, slots.to(leaf.device, non_blocking=True))
    value: torch.Tensor = get_items(storage, slots).get(key)
    return value

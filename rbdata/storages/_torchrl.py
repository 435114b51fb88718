"""Reading torchrl 0.14's storage ``state_dict`` layouts into rbdata's.

torchrl's tensor storages save ``{"_storage": tensor | TensorDict state, "initialized",
"_len"}`` (the whole ``max_size`` rows, ``_len`` of them filled), its list storages
``{"_storage": [item or item.state_dict()]}``. rbdata's ``load_state_dict`` recognises
these layouts and loads what they hold, or raises ValueError naming what it cannot read;
it never loads nothing in silence.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from ._base import Storage

_TORCHRL_KEYS = {"_storage", "initialized", "_len"}


def is_torchrl_layout(state: Any) -> bool:
    """Whether ``state`` is a torchrl storage state (its keys, none of rbdata's)."""
    return isinstance(state, dict) and "_storage" in state and set(state) <= _TORCHRL_KEYS


def _as_tensordict(raw: Any, what: str) -> TensorDictBase:
    try:
        return TensorDict().load_state_dict(raw, strict=False)
    except (TypeError, ValueError, RuntimeError, KeyError) as err:
        raise ValueError(f"torchrl {what} is not a TensorDict state ({err}).") from err


def tensor_storage_state(state: dict[str, Any], storage: Storage, scratch: Any) -> dict[str, Any]:
    """The rbdata state of ``storage``'s kind holding what torchrl's ``state`` holds.

    Args:
        state: torchrl's storage state.
        storage: the storage it is loaded into.
        scratch: an empty ndim=1 tensor storage of ``storage.max_size`` slots: the rows
            are written there, and its state (rbdata's layout) is returned.

    Raises:
        ValueError: for a state this rbdata cannot read (naming what), or more rows than
            ``storage.max_size``.
    """
    raw, length = state["_storage"], state.get("_len", 0)
    if isinstance(length, torch.Tensor):
        length = int(length)
    if type(length) is not int or length < 0:
        raise ValueError(f"torchrl storage state '_len' must be an int >= 0, got {length!r}.")
    if storage.ndim > 1 and length:
        raise ValueError(
            f"a torchrl state of a storage with ndim={storage.ndim} is not read: rbdata lays "
            "multi-dim storages out as flat cells; load it into an ndim=1 storage."
        )
    if isinstance(raw, torch.Tensor | TensorDictBase):  # a TensorDict: from a torchrl dump
        data: Any = raw
    elif isinstance(raw, dict) and raw:
        data = _as_tensordict(raw, "storage '_storage'")
    elif raw is None or raw == {}:
        data = None
    else:
        raise ValueError(
            f"torchrl storage state '_storage' is a {type(raw).__name__}; rbdata reads a "
            "tensor or a TensorDict state there."
        )
    if length and (data is None or data.shape[0] < length):
        raise ValueError(f"torchrl storage state says _len={length} but holds fewer rows.")
    if length > storage.max_size:
        raise ValueError(
            f"torchrl storage state holds {length} items; this storage has max_size "
            f"{storage.max_size}."
        )
    if length:
        scratch.set(slice(0, length), data[:length])
    converted: dict[str, Any] = scratch.state_dict()
    return converted


def list_storage_state(state: dict[str, Any]) -> dict[str, Any]:
    """The rbdata list-storage state holding torchrl's items (TensorDict states rebuilt)."""
    raw = state["_storage"]
    if not isinstance(raw, list | tuple):
        raise ValueError(
            f"torchrl list storage state '_storage' is a {type(raw).__name__}, expected a list."
        )
    items = [
        _as_tensordict(item, f"list storage item {i}") if type(item) is OrderedDict else item
        for i, item in enumerate(raw)
    ]
    return {"len": len(items), "items": items}


def refuse_compressed(state: dict[str, Any]) -> None:
    """Refuse torchrl's compressed frames (its codec's): raise naming them."""
    if "_storage" in state and "_metadata" in state and "frames" not in state:
        raise ValueError(
            "a torchrl CompressedListStorage state ('_storage', '_metadata') is not read: its "
            "frames are compressed by torchrl's own codec; extend an rbdata storage with the "
            "decompressed items instead."
        )


def without_index_entry(state: Any) -> Any:
    """A torchrl buffer state without the ``"index"`` entry torchrl's TensorDict buffers store.

    torchrl's ``TensorDictReplayBuffer`` writes each row's ``"index"`` into the storage;
    rbdata's stores the data only (samples carry ``index``), so the entry is left out.
    """
    storage = state.get("_storage") if isinstance(state, dict) else None
    if not is_torchrl_layout(storage):
        return state
    assert storage is not None
    rows = storage["_storage"]
    if isinstance(rows, TensorDictBase) and "index" in rows.keys():  # from a torchrl dump
        rows = rows.exclude("index")
    elif isinstance(rows, dict) and "index" in rows:
        rows = _as_tensordict(rows, "storage '_storage'").exclude("index").state_dict()
    else:
        return state
    return {**state, "_storage": {**storage, "_storage": rows}}

"""The one place rbdata reads tensordict's private structure (the loader's hand-out fast paths).

Every batch the loader hands out goes through ``default_convert`` (a key
listing and one lookup per key) and often a shallow copy; tensordict's public
calls for those cost several times more than reading its key -> value dict
directly. Measured with ``timeit`` (best of 5) on a batch of 256 rows with 6
leaves, one nested TensorDict (tensordict 0.15.3, torch 2.13 CPU, Python 3.11):

=====================================  ===============  ====================================
what                                   here (private)   public API
=====================================  ===============  ====================================
leaf keys, nested as tuples            5.4 us           25.7 us (``keys(True, True)``)
one nested leaf, ``("next", "reward")``  0.17 us          3.4 us (``TensorDict.get``)
one top-level leaf                     0.09 us          0.41 us (``TensorDict.get``)
shallow copy                           8.9 us           20.2 us (``TensorDict.copy``)
a ReplayBatch over a TensorDict's      5.0 us           26.3 us (``ReplayBatch(dict(td.items())``,
tensors                                                  ``batch_size=, device=)``)
=====================================  ===============  ====================================

Everything here falls back to the public call when the structure is not the
one expected (another tensordict version, a locked or named TensorDict).
"""

from __future__ import annotations

from typing import Any, TypeVar

import torch
from tensordict import TensorDict

__all__ = ["leaf", "leaf_keys", "shallow_copy", "source", "wrap"]

T = TypeVar("T", bound=TensorDict)

#: a plain TensorDict's attributes (tensordict 0.15): anything else takes the public copy
_PLAIN_STATE = frozenset(("_tensordict", "_device", "_batch_size", "_td_dim_names"))


def source(td: TensorDict) -> dict[Any, Any]:
    """``td``'s key -> value dict (values: tensors and nested TensorDicts), not a copy."""
    out: dict[Any, Any] = td._tensordict
    return out


def wrap(cls: type[T], td: TensorDict) -> T:
    """A ``cls`` over ``td``'s own tensors (no copy, no checks: ``td`` was checked already)."""
    out: T = cls._new_unsafe(source=source(td), batch_size=td.batch_size, device=td.device)
    return out


def leaf_keys(td: TensorDict) -> list[str | tuple[str, ...]]:
    """``td``'s leaf keys, a tuple for a nested one (``keys(True, True)``'s order)."""
    keys: list[str | tuple[str, ...]] = []
    _collect(source(td), (), keys)
    return keys


def _collect(entries: dict[str, Any], prefix: tuple[str, ...], keys: list[Any]) -> None:
    for key, value in entries.items():
        if isinstance(value, TensorDict):
            _collect(source(value), (*prefix, key), keys)
        else:
            keys.append((*prefix, key) if prefix else key)


def leaf(td: TensorDict, key: Any) -> torch.Tensor | None:
    """The tensor stored at ``key`` (str or tuple of str), or None for anything else."""
    entries = source(td)
    if type(key) is tuple:
        for part in key[:-1]:
            sub = entries.get(part) if type(part) is str else None
            if not isinstance(sub, TensorDict):
                return None
            entries = source(sub)
        key = key[-1]
    if type(key) is not str:
        return None
    value = entries.get(key)
    return value if isinstance(value, torch.Tensor) else None


def shallow_copy(td: T) -> T:
    """``td.copy()`` for a plain (unlocked, unnamed) TensorDict: new structure, same tensors.

    Anything else (a locked or named TensorDict, another tensordict version's
    attributes) takes TensorDict's own ``copy``.
    """
    state = td.__dict__
    entries = state.get("_tensordict")
    if (
        state.keys() != _PLAIN_STATE
        or state["_td_dim_names"] is not None
        or type(entries) is not dict
    ):
        copied: T = TensorDict.copy(td)
        return copied
    new = object.__new__(type(td))
    new.__dict__.update(state)
    new._tensordict = {
        key: shallow_copy(value) if type(value) is TensorDict else value
        for key, value in entries.items()
    }
    return new

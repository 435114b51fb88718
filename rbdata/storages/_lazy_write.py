"""Writing a lazy stack of items (a collector's output) through views of the rows.

A ``LazyStackedTensorDict`` stacked along the items dim holds one TensorDict per
item. Its members are checked one by one against the stored layout (no dense copy
of the batch is made for that), then the batch is written with
``TensorDictBase.update_at_`` into a TensorDict of views of the rows, as torchrl's
storages write it. Anything else (a member with other keys, dtypes or shapes, a
write into an uninitialized, multi-dimensional or compilable storage, data that
views the rows) is left to the ordinary write, which reports what differs.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import LazyStackedTensorDict, TensorDictBase

from ._pytree import _Structure


def members_fit(
    structure: _Structure, dtypes: list[torch.dtype], tails: list[torch.Size], data: Any
) -> bool:
    """Whether ``data`` is a lazy stack of items each laid out exactly as the stored ones."""
    if (
        type(data) is not LazyStackedTensorDict
        or data.stack_dim != 0
        or not structure.is_tensordict
        or structure.has_constants
        or not data.tensordicts
    ):
        return False
    for member in data.tensordicts:
        try:
            leaves = structure.flatten(member)
        except (KeyError, TypeError):
            return False
        if [t.dtype for t in leaves] != dtypes or [t.shape for t in leaves] != tails:
            return False
    return True


def write_members(
    view: TensorDictBase, slots: int | range | tuple[range, range] | torch.Tensor, data: Any
) -> None:
    """Write the items of ``data`` into ``view`` (the rows' TensorDict) at ``slots``."""
    if isinstance(slots, tuple):
        index: Any = torch.cat([torch.arange(r.start, r.stop) for r in slots])
    elif isinstance(slots, range):
        index = slice(slots.start, slots.stop, slots.step)
    else:
        index = slots
    view.update_at_(data, index)

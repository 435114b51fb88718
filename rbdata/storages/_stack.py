"""Stacking a list given to ``extend`` into one batch (tensor storages)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import is_tensor_collection
from torch.utils._pytree import tree_map

from rbdata.errors import IncompatibleValueError


def _stacked(items: list[Any]) -> Any:
    """A list of items as one batch: tensors and tensor collections stacked, PyTrees leaf-wise.

    Raises:
        IncompatibleValueError: (a ValueError and a RuntimeError, as torchrl raises) when
            the items differ in structure or shape.
    """
    first = items[0] if items else None
    try:
        if isinstance(first, torch.Tensor) or is_tensor_collection(first):
            return torch.stack(items)
        if isinstance(first, dict | list | tuple):
            return tree_map(lambda *leaves: torch.stack(leaves), first, *items[1:])
    except (RuntimeError, TypeError, ValueError) as err:
        raise IncompatibleValueError(
            f"Stacking the elements of the list resulted in an error ({err}): the items of a "
            "list given to extend must share one structure and shape (a tuple is a PyTree of "
            "batches, a list a sequence of items)."
        ) from err
    return torch.as_tensor(items)

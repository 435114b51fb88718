"""Which members of an ensemble an index selects (shared by the four ensemble classes).

torchrl's ensembles (storages, samplers, writers, buffers) all read an index the
same way: ``[:]`` is the ensemble itself, an int is one member, and a slice, a
list, a range, a 1-d integer tensor or array selects a sub-ensemble.

Example:
    >>> from rbdata._component.members import select_members
    >>> select_members(slice(None), 3), select_members(1, 3), select_members([2, 0], 3)
    (None, 1, [2, 0])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["select_members"]

_INDEX_ERROR = (
    "Expected an index of type torch.Tensor, range, np.ndarray, int, slice or ellipsis, "
    "got {} instead."
)


def select_members(index: Any, count: int) -> int | list[int] | None:
    """The members of an ensemble of ``count`` that ``index`` selects.

    Returns:
        None for ``[:]`` (the whole ensemble, itself), an int for one member, a
        list of ints for a sub-ensemble.

    Raises:
        RuntimeError: for a tensor index of more than one dimension (torchrl's type).
        TypeError: for a floating-point index.
        IndexError: for a member that does not exist or an index of another kind.
    """
    if index is Ellipsis or (isinstance(index, slice) and index == slice(None)):
        return None
    if isinstance(index, list | range | np.ndarray):
        index = torch.as_tensor(index)
    if isinstance(index, torch.Tensor):
        if index.ndim > 1:
            raise RuntimeError(
                "Cannot index an ensemble with tensor indices that have more than one "
                f"dimension (got shape {tuple(index.shape)})."
            )
        if index.is_floating_point():
            raise TypeError(
                "A floating point index was received when an integer dtype was expected."
            )
        if index.ndim == 0:
            index = int(index)
        else:
            members = [int(i) for i in index.tolist()]
            if not members:
                raise IndexError(_INDEX_ERROR.format(type(index)))
            for member in members:
                if not -count <= member < count:
                    raise IndexError(_INDEX_ERROR.format(type(index)))
            return [member % count for member in members]
    if isinstance(index, slice):
        return list(range(count))[index]
    if isinstance(index, bool) or not isinstance(index, int | np.integer):
        raise IndexError(_INDEX_ERROR.format(type(index)))
    member = int(index)
    if not -count <= member < count:
        raise IndexError(f"member {member} does not exist: the ensemble has {count} members.")
    return member % count

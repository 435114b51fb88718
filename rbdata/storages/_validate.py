"""Checks of the leaves written into a tensor storage: dtypes and shapes, nothing cast."""

from __future__ import annotations

import torch

from ._pytree import _Structure
from ._row_layout import _PackedLayout


def _check_ndim(ndim: int) -> None:
    if not isinstance(ndim, int) or isinstance(ndim, bool) or ndim < 1:
        raise ValueError(f"ndim must be a positive int, got {ndim!r}.")


def _tails(layout: _PackedLayout, lead: tuple[int, ...]) -> list[torch.Size]:
    """Expected shape of each leaf after its leading items dim."""
    return [torch.Size((*lead, *shape)) for shape in layout.shapes]


def _check_leaves(
    structure: _Structure,
    leaves: list[torch.Tensor],
    dtypes: list[torch.dtype],
    tails: list[torch.Size],
    batched: bool,
) -> int:
    """Check every leaf's dtype and shape; return the number of items."""
    n = -1 if batched else 1
    for i, (leaf, dtype, tail) in enumerate(zip(leaves, dtypes, tails, strict=True)):
        if leaf.dtype != dtype:
            raise TypeError(
                f"{structure.key_repr(i)}: got dtype {leaf.dtype}, expected {dtype} "
                "(the storage does not cast)."
            )
        shape = leaf.shape
        if batched:
            if n < 0 and shape:
                n = shape[0]
            ok = len(shape) == len(tail) + 1 and shape[0] == n and shape[1:] == tail
            expected = str([n if n >= 0 else "n", *tail])
        else:
            ok = shape == tail
            expected = str(list(tail))
        if not ok:
            raise ValueError(
                f"{structure.key_repr(i)}: got shape {list(shape)}, expected {expected}."
            )
    return n

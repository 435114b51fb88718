"""Coordinates of a storage with ``ndim > 1`` (one per dim, torchrl's tuples) as flat cells."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["cells_at"]


def cells_at(shape: tuple[int, ...], coordinates: tuple[Any, ...]) -> int | torch.Tensor:
    """The flat cells named by a tuple of ``ndim`` coordinates (ints or integer tensors).

    Raises:
        TypeError: for coordinates that are not integers.
        ValueError: for a tuple of the wrong length or coordinates outside the storage.
    """
    if len(coordinates) != len(shape):
        raise ValueError(
            f"index is a tuple of {len(coordinates)} coordinates, expected {len(shape)} (one "
            f"per dim of the storage's shape {list(shape)})."
        )
    parts = [torch.as_tensor(c) for c in coordinates]
    if any(p.is_floating_point() or p.is_complex() or p.dtype == torch.bool for p in parts):
        raise TypeError(f"index coordinates must be integers, got {[p.dtype for p in parts]}.")
    cells = torch.zeros((), dtype=torch.long)  # broadcasts with the coordinates
    for size, part in zip(shape, parts, strict=True):
        if bool(((part < 0) | (part >= size)).any()):
            raise ValueError(f"index holds coordinates outside the storage's shape {list(shape)}.")
        cells = cells * size + part.to(torch.long)
    return int(cells) if cells.ndim == 0 else cells

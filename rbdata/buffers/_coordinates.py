"""Flat cells <-> coordinates: the one place a buffer converts the indices it shows its users.

Inside a buffer every index is a flat cell of the storage (samplers, priorities
and consume-after-n counts live on flat cells; a generation stamp covers an item,
all of its cells: :func:`items_of`). A storage with
``ndim > 1`` of shape ``[capacity, *lead]`` shows its users coordinates, as
torchrl does: ``extend`` returns a ``[n_cells, ndim]`` LongTensor, a draw's
``info["index"]`` is a tuple of ``ndim`` tensors and a TensorDict batch holds
``"index"`` as ``[B, ndim]``; ``update_priority`` takes any of these back.
For ``ndim == 1`` nothing is converted (callers branch once on ``storage.ndim``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["cells_of_rows", "items_of", "to_coordinates", "to_flat", "to_tuple"]


def cells_of_rows(rows: torch.Tensor, cells: int) -> torch.Tensor:
    """The flat cells of the written items ``rows`` (``cells`` cells each), row after row.

    Examples:
        >>> import torch
        >>> cells_of_rows(torch.tensor([4, 0]), 2).tolist()
        [8, 9, 0, 1]
    """
    offsets = torch.arange(cells, device=rows.device)
    return (rows.reshape(-1, 1) * cells + offsets).reshape(-1)


def items_of(cells: torch.Tensor, lead: int) -> torch.Tensor:
    """The items (dim-0 slots) of the flat cells ``cells`` (``lead`` cells per item).

    Examples:
        >>> import torch
        >>> items_of(torch.tensor([0, 1, 5]), 2).tolist()
        [0, 0, 2]
    """
    return cells if lead == 1 else torch.div(cells, lead, rounding_mode="floor")


def to_coordinates(flat: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """The coordinates ``[*flat.shape, len(shape)]`` of the flat cells ``flat``.

    Examples:
        >>> import torch
        >>> to_coordinates(torch.tensor([0, 1, 5]), (3, 2)).tolist()
        [[0, 0], [0, 1], [2, 1]]
    """
    return torch.stack(to_tuple(flat, shape), -1)


def to_tuple(flat: torch.Tensor, shape: Sequence[int]) -> tuple[torch.Tensor, ...]:
    """The coordinates of the flat cells ``flat`` as a tuple of ``len(shape)`` tensors.

    Examples:
        >>> import torch
        >>> to_tuple(torch.tensor([0, 5]), (3, 2))
        (tensor([0, 2]), tensor([0, 1]))
    """
    return tuple(torch.unravel_index(flat, tuple(shape)))


def to_flat(
    index: torch.Tensor | tuple[torch.Tensor, ...] | int,
    shape: Sequence[int],
    name: str = "index",
) -> torch.Tensor:
    """Flat cells of ``index``: coordinates (``[..., ndim]`` or a tuple), or flat cells as given.

    A 1-D tensor (or an int) holds flat cells and is returned as a 1-D tensor
    unchanged, as torchrl's samplers read it; a tensor of two or more dims
    holds coordinates along its last dim; a tuple holds one tensor per dim.

    Args:
        index: the index a user passed back.
        shape: the storage's shape ``[capacity, *lead]``.
        name: the argument's name, for error messages.

    Returns:
        The flat cells, a 1-D LongTensor (coordinates flattened in order).

    Raises:
        TypeError: if ``index`` does not hold integers.
        ValueError: for coordinates of the wrong width or outside ``shape``.

    Examples:
        >>> import torch
        >>> to_flat(torch.tensor([[0, 1], [2, 0]]), (3, 2)).tolist()
        [1, 4]
        >>> to_flat((torch.tensor([2]), torch.tensor([1])), (3, 2)).tolist()
        [5]
        >>> to_flat(torch.tensor([[0, 1, 0]]), (3, 2))
        Traceback (most recent call last):
        ...
        ValueError: index has shape [1, 3]: expected coordinates [N, 2] (or a tuple of ...
    """
    ndim = len(shape)
    if isinstance(index, tuple):
        if len(index) != ndim:
            raise ValueError(
                f"{name} is a tuple of {len(index)} tensors, expected {ndim} (one per dim of "
                f"the storage's shape {list(shape)})."
            )
        parts = [_integers(torch.as_tensor(i), name) for i in index]
        shapes = [list(p.shape) for p in parts]
        if any(shape != shapes[0] for shape in shapes):
            raise ValueError(f"{name} is a tuple of tensors of different shapes {shapes}.")
        coords = torch.stack(parts, -1)
    else:
        tensor = _integers(torch.as_tensor(index), name)
        if tensor.ndim <= 1:
            return tensor.reshape(-1)
        if tensor.shape[-1] != ndim:
            raise ValueError(
                f"{name} has shape {list(tensor.shape)}: expected coordinates [N, {ndim}] (or a "
                f"tuple of {ndim} tensors, or 1-D flat cells) for a storage of shape "
                f"{list(shape)}."
            )
        coords = tensor
    coords = coords.reshape(-1, ndim)
    bounds = torch.tensor(list(shape), device=coords.device)
    bad = (coords < 0) | (coords >= bounds)
    if bool(bad.any()):
        rows = coords[bad.any(-1)][:5].tolist()
        raise ValueError(
            f"{name} holds coordinates {rows} outside the storage's shape {list(shape)}."
        )
    strides = torch.tensor([math.prod(shape[d + 1 :]) for d in range(ndim)], device=coords.device)
    return (coords * strides).sum(-1)


def _integers(tensor: torch.Tensor, name: str) -> torch.Tensor:
    if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
        raise TypeError(f"{name} must hold integers, got dtype {tensor.dtype}.")
    return tensor.to(torch.long)

"""Checking a saved tensor-storage state against a storage before anything is written."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch

from ._pytree import _Structure
from ._row_layout import _PackedLayout


def _parse_dtype(name: Any, key: str) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"saved spec of {key!r} names an unknown dtype {name!r}.")
    return dtype


class LaidOut(NamedTuple):
    """How an initialized tensor storage lays its items out (what a saved state must match)."""

    structure: _Structure
    layout: _PackedLayout
    lead: tuple[int, ...]  # the leading cell shape of an item (ndim > 1)
    capacity: int  # items along the first dim


def _mismatch(
    ours: LaidOut, structure: _Structure, layout: _PackedLayout, lead: tuple[int, ...]
) -> str | None:
    """Describe how a saved layout differs from an initialized storage's (None if it does not)."""
    mine = dict(
        zip(
            ours.structure.names,
            zip(ours.layout.dtypes, ours.layout.shapes, strict=True),
            strict=True,
        )
    )
    theirs = dict(zip(structure.names, zip(layout.dtypes, layout.shapes, strict=True), strict=True))
    missing = [k for k in mine if k not in theirs]
    extra = [k for k in theirs if k not in mine]
    if missing or extra:
        return f"saved keys lack {missing} and add {extra}; storage keys are {list(mine)}"
    for key, (dtype, shape) in theirs.items():
        if mine[key] != (dtype, shape):
            return (
                f"key {key!r} was saved with shape {list(shape)} and dtype {dtype}, the storage "
                f"has shape {list(mine[key][1])} and dtype {mine[key][0]}"
            )
    if lead != ours.lead:
        return f"saved leading cell shape {list(lead)}, the storage has {list(ours.lead)}"
    if structure.state() != ours.structure.state():
        return (
            f"saved structure {structure.state()} differs from the storage's "
            f"{ours.structure.state()}"
        )
    return None


def _parse_state(
    state_dict: dict[str, Any], ndim: int, max_size: int, ours: LaidOut | None
) -> tuple[_Structure, _PackedLayout, tuple[int, ...], int, list[torch.Tensor]] | None:
    """Validate a tensor storage's saved state against a storage's ``ndim`` and ``max_size``.

    ``ours`` is the storage's layout once initialized (None before: the saved one is taken).

    Returns:
        ``None`` for the state of an uninitialized storage, else the structure,
        layout, leading cell shape, filled cells and content leaves to write.

    Raises:
        ValueError: naming what does not match; nothing has been changed.
    """
    structure_state = state_dict.get("structure")
    filled = state_dict.get("len", 0)
    if structure_state is None:
        if filled:
            raise ValueError(f"saved state has len={filled} but no structure.")
        return None
    structure = _Structure.from_state(structure_state)
    spec = state_dict.get("spec") or {}
    content = state_dict.get("content") or {}
    lead = tuple(int(x) for x in state_dict.get("lead", ()))
    dtypes, shapes = [], []
    for name in structure.names:
        entry = spec.get(name)
        if not isinstance(entry, dict) or "shape" not in entry or "dtype" not in entry:
            raise ValueError(f"saved spec lacks key {name!r} (spec keys: {list(spec)}).")
        dtypes.append(_parse_dtype(entry["dtype"], name))
        shapes.append(tuple(int(x) for x in entry["shape"]))
    layout = _PackedLayout(dtypes, shapes)
    if len(lead) != ndim - 1:
        raise ValueError(
            f"saved leading cell shape {list(lead)} does not fit an ndim={ndim} storage."
        )
    cells = math.prod(lead)
    if ours is not None:
        problem = _mismatch(ours, structure, layout, lead)
        if problem is not None:
            raise ValueError(f"saved storage does not match this storage: {problem}.")
        capacity = ours.capacity
    else:
        capacity = -(-max_size // cells)  # ceil, as the storage allocates
    if not isinstance(filled, int) or filled < 0 or filled % cells or filled // cells > capacity:
        raise ValueError(
            f"saved len {filled!r} does not fit: expected a multiple of {cells} up to "
            f"{capacity * cells} cells."
        )
    leaves = []
    for name, dtype, shape in zip(structure.names, dtypes, shapes, strict=True):
        leaf = content.get(name)
        expected = (filled, *shape)
        if not isinstance(leaf, torch.Tensor) or leaf.dtype != dtype or leaf.shape != expected:
            given = (
                f"shape {list(leaf.shape)} and dtype {leaf.dtype}"
                if isinstance(leaf, torch.Tensor)
                else repr(type(leaf).__name__)
            )
            raise ValueError(
                f"saved content of {name!r}: got {given}, expected shape {list(expected)} and "
                f"dtype {dtype}."
            )
        leaves.append(leaf)
    return structure, layout, lead, filled, leaves


def _spec(names: list[str], layout: _PackedLayout) -> dict[str, dict[str, Any]]:
    return {
        name: {"shape": list(shape), "dtype": str(dtype).removeprefix("torch.")}
        for name, shape, dtype in zip(names, layout.shapes, layout.dtypes, strict=True)
    }

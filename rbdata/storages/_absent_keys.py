"""A TensorDict batch lacking some of a tensor storage's keys: zeros in their place.

torchrl writes a TensorDict holding a strict subset of the stored keys (the
entries it lacks keep what the rows held). A tensor storage here accepts it
too, but writes zeros in the entries the batch lacks, so that no row mixes
two transitions, and warns once per storage and set of missing keys. Only
TensorDict levels may lack keys (a dict PyTree must match, as in torchrl); a
wrong dtype or shape still raises, and nothing is written. A key the storage
does not hold is added to it (``_new_keys``), unless other processes map its
rows.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import torch
from tensordict import TensorDictBase

from ._pytree import _TD, PathKey, _check_keys, _collect_paths, _flatten, _Node, _Structure
from ._validate import _check_leaves


def flatten_or_zero(
    structure: _Structure,
    data: Any,
    dtypes: list[torch.dtype],
    tails: list[torch.Size],
    batched: bool,
    warned: set[tuple[PathKey, ...]] | None,
) -> list[torch.Tensor]:
    """The leaves of ``data`` in storage order, zeros for the stored entries it lacks.

    Args:
        structure: the stored structure.
        data: a batch (``batched``: leading items dim) or one item.
        dtypes: the stored dtype of each leaf.
        tails: the stored per-item shape of each leaf.
        batched: whether ``data`` has the leading items dim.
        warned: the sets of missing keys already warned about (updated); None: no
            warning (a check, not the write).

    Raises:
        KeyError: ``data`` holds a key the storage does not, or none of its leaves.
        TypeError: a container differs from the stored one, or a dtype does.
        ValueError: a shape differs from the stored one.
    """
    try:
        return structure.flatten(data)
    except KeyError:
        given: list[torch.Tensor | None] = []
        missing: list[PathKey] = []
        _flatten_subset(structure.root, data, (), given, missing)
        present = [t for t in given if t is not None]
        if not missing or not present:
            raise
    first = present[0]
    n = (first.shape[0] if first.ndim else 0) if batched else None
    leaves = [
        t
        if t is not None
        else torch.zeros(tail if n is None else (n, *tail), dtype=dtype, device=first.device)
        for t, dtype, tail in zip(given, dtypes, tails, strict=True)
    ]
    _check_leaves(structure, leaves, dtypes, tails, batched)
    key = tuple(missing)
    if warned is not None and key not in warned:
        warned.add(key)
        shown = [p[0] if len(p) == 1 else p for p in missing]
        warnings.warn(
            f"the data lacks stored key(s) {shown}: they are written as zeros in the rows it "
            "fills (torchrl leaves their previous values). Shown once per storage and set of "
            "missing keys.",
            UserWarning,
            stacklevel=_outside_rbdata(),
        )
    return leaves


def _outside_rbdata() -> int:
    """The ``stacklevel`` of the first caller outside the rbdata package (the user's write)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("rbdata."):
        frame, level = frame.f_back, level + 1
    return level


def subset_leaves(structure: _Structure, data: Any) -> list[torch.Tensor | None]:
    """The leaves of ``data`` in storage order, None for the stored ones it lacks.

    Raises:
        KeyError: ``data`` holds a key the storage does not.
        TypeError: a container differs from the stored one.
    """
    given: list[torch.Tensor | None] = []
    _flatten_subset(structure.root, data, (), given, [])
    return given


def given_leaves(structure: _Structure, data: Any) -> list[torch.Tensor]:
    """The leaves ``data`` holds, the stored ones it lacks left out (KeyError/TypeError)."""
    try:
        return structure.flatten(data)
    except KeyError:
        given: list[torch.Tensor | None] = []
        _flatten_subset(structure.root, data, (), given, [])
        return [t for t in given if t is not None]


def _flatten_subset(
    node: _Node,
    data: Any,
    path: PathKey,
    out: list[torch.Tensor | None],
    missing: list[PathKey],
) -> None:
    """``_flatten``, with None for each leaf a TensorDict level lacks (its path in ``missing``)."""
    if node.kind != _TD or not isinstance(data, TensorDictBase):
        _flatten(node, data, path, out)  # type: ignore[arg-type]  # appends tensors only
        return
    keys = node.mapping_keys
    items = dict(data.items())
    if any(key not in keys for key in items):
        _check_keys(node, path, items)
    for key, child in zip(keys, node.children, strict=True):
        if key in items:
            _flatten_subset(child, items[key], (*path, key), out, missing)
            continue
        absent: list[PathKey] = []
        _collect_paths(child, (*path, key), absent)
        out.extend([None] * len(absent))
        missing.extend(absent)

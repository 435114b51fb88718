"""A write carrying keys a tensor storage lacks: the structure and row layout that hold them.

torchrl's ``LazyTensorStorage`` adds a key a written TensorDict brings (its
storage is a TensorDict: the other rows read zeros in it); its
``LazyMemmapStorage`` drops it silently. An unshared rbdata tensor storage
adds it: :func:`grow` gives the stored structure with the new keys appended
to their TensorDict level, and the packed row layout that holds them; the
storage then lays its rows out anew (every filled row copied, see
``_TensorRows._relayout``), the rows not written reading zeros in the new
entries. Only TensorDict levels take new keys (a dict PyTree must match, as
in torchrl; a tensorclass has fixed fields).

A storage whose rows other processes map cannot change their layout under
them: :func:`refusal` is the ``KeyError`` it raises instead. What is cached
on a layout lives with the rows and the structure and is replaced with them
(gather pools, shape caches, the missing-keys warnings). Batches a buffer
sampled ahead (``prefetch``) before the write were read before it, and lack
the new keys as they lack any later write: they are part of the buffer's
state (drawn, counted), so they are handed out, not dropped.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from tensordict import TensorDictBase

from ._absent_keys import flatten_or_zero, subset_leaves
from ._pytree import _TD, PathKey, _infer, _Node, _Structure
from ._row_layout import _PackedLayout
from ._validate import _check_leaves, _tails

__all__ = ["Grown", "NewKeys", "grow", "refusal"]


class Grown(NamedTuple):
    """The structure and row layout of a storage that took new keys.

    Attributes:
        structure: the stored structure with the new keys.
        layout: the row layout of its leaves.
        added: the keys added (nested keys as tuples).
        moves: ``(old leaf, new leaf)`` for every leaf stored before.
    """

    structure: _Structure
    layout: _PackedLayout
    added: list[PathKey]
    moves: list[tuple[int, int]]

    def shown(self) -> list[Any]:
        """The added keys as messages show them (a top-level key as is)."""
        return [path[0] if len(path) == 1 else path for path in self.added]


class NewKeys(KeyError):
    """``data`` holds keys the storage lacks and can add (a ``KeyError`` where it is not caught).

    The storage's write catches it and lays its rows out as ``grown`` says;
    ``validate`` accepts the data.

    Args:
        message: the error's text (the keys that differ).
        grown: the structure and layout that hold the data.
    """

    def __init__(self, message: str, grown: Grown) -> None:
        super().__init__(message)
        self.grown = grown


def grow(
    structure: _Structure,
    layout: _PackedLayout,
    lead: tuple[int, ...],
    data: Any,
    batched: bool,
) -> Grown | None:
    """The structure and layout that hold ``data`` too, checked against it (None: no new key).

    Args:
        structure: the stored structure.
        layout: its row layout.
        lead: the storage's leading cell shape (``ndim > 1``).
        data: a batch (``batched``) or one item, holding keys the storage lacks.
        batched: whether ``data`` has the leading items dim.

    Raises:
        KeyError: ``data`` holds a key at a level that cannot take one (a dict).
        TypeError, ValueError: a leaf of ``data`` does not fit the grown layout (dtype,
            shape), or the new keys clash with stored ones once flattened.
    """
    added: list[PathKey] = []
    storage_dims = len(lead) + 1 if batched else len(lead)
    root = _grown(structure.root, data, (), storage_dims, added)
    if not added:
        return None
    grown = _Structure(root)
    given = subset_leaves(grown, data)
    before = {path: i for i, path in enumerate(structure.paths)}
    dtypes: list[torch.dtype] = []
    shapes: list[tuple[int, ...]] = []
    moves: list[tuple[int, int]] = []
    for j, (path, leaf) in enumerate(zip(grown.paths, given, strict=True)):
        i = before.get(path)
        if i is not None:
            dtypes.append(layout.dtypes[i])
            shapes.append(layout.shapes[i])
            moves.append((i, j))
        else:
            assert leaf is not None  # a new leaf comes from the data
            dtypes.append(leaf.dtype)
            shapes.append(tuple(leaf.shape[storage_dims:]))
    new_layout = _PackedLayout(dtypes, shapes)
    tails = _tails(new_layout, lead)
    leaves = flatten_or_zero(grown, data, new_layout.dtypes, tails, batched, None)
    _check_leaves(grown, leaves, new_layout.dtypes, tails, batched)
    return Grown(grown, new_layout, added, moves)


def _grown(node: _Node, data: Any, path: PathKey, lead: int, added: list[PathKey]) -> _Node:
    """``node`` with the keys ``data`` brings to its TensorDict levels (their paths: ``added``)."""
    if node.kind != _TD or not isinstance(data, TensorDictBase):
        return node
    items = dict(data.items())
    stored = set(node.mapping_keys)
    keys = list(node.mapping_keys)
    count = len(added)
    children = [
        _grown(child, items[key], (*path, key), lead, added) if key in items else child
        for key, child in zip(keys, node.children, strict=True)
    ]
    for key, value in items.items():
        if key not in stored:
            children.append(_infer(value, lead, (*path, key), []))
            keys.append(key)
            added.append((*path, key))
    if len(added) == count:
        return node
    return _Node(_TD, keys, children, node.batch)


def refusal(grown: Grown, storage: str, why: str) -> KeyError:
    """The ``KeyError`` of a storage that cannot take the new keys now.

    Args:
        grown: what the write would add.
        storage: the storage's class name.
        why: why the layout cannot change (e.g. other processes map the rows).
    """
    return KeyError(
        f"the data holds key(s) {grown.shown()} that this {storage} does not store, and it "
        f"cannot add them: {why}. Write every key in the first write (it fixes the layout), or "
        "add the keys to an unshared storage before sharing it."
    )

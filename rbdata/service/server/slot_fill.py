"""Gathering a batch straight into a shared-memory slot, when the hosted buffer allows it.

The generic slot path gathers a batch (a fresh copy) and then copies it into
the slot: two passes over the batch's bytes, the second as costly as the
first for pixel batches. For the common case, a transition buffer of
TensorDicts in a CPU :class:`~rbdata.TensorStorage` without transforms,
:func:`fill_slot` instead lays the batch out in the slot and fills each leaf
with one ``torch.index_select(storage_leaf, 0, index, out=...)`` under the
buffer's lock: one pass, and the batch ``buffer.gather`` would return (with
the draw's info entries attached when asked). :func:`direct_sources` says
whether a buffer qualifies; anything else takes the generic path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from rbdata.buffers import ReplayBuffer
from rbdata.buffers.protocol import Draw
from rbdata.service.transport.codec import allocate, dict_node
from rbdata.storages import TensorStorage

__all__ = ["Filled", "Layouts", "Sources", "direct_sources", "fill_slot"]

_INFO_ROW_BYTES = 64  # room kept per row for the draw's info entries (index, generation, weight)


@dataclass(frozen=True)
class Sources:
    """The storage leaves a batch is gathered from: keys and ``[capacity, ...]`` views."""

    keys: list[Any]
    leaves: list[torch.Tensor]

    def fits(self, rows: int, slot_bytes: int) -> bool:
        """Whether a batch of ``rows`` rows (info included) fits in ``slot_bytes`` bytes."""
        per_row = sum(t.element_size() * math.prod(t.shape[1:]) for t in self.leaves)
        alignment = 64 * (len(self.leaves) + 8)
        return rows * (per_row + _INFO_ROW_BYTES) + alignment <= slot_bytes


@dataclass(frozen=True)
class Filled:
    """Tree nodes of a batch written into a slot (see :mod:`rbdata.service.transport.codec`)."""

    batch: Any
    index: Any
    info: dict[str, Any]
    nbytes: int


def direct_sources(buffer: Any) -> Sources | None:
    """The leaves to gather from, when ``buffer`` qualifies for the fast path (else None).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> from rbdata.service.server.slot_fill import direct_sources
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10))
        >>> _ = rb.extend(TensorDict({"obs": torch.zeros(4, 3)}, [4]))
        >>> sources = direct_sources(rb)
        >>> sources.keys, sources.fits(rows=2, slot_bytes=4096)
        (['obs'], True)
        >>> direct_sources(ReplayBuffer(storage=LazyTensorStorage(10))) is None  # empty
        True
    """
    if not isinstance(buffer, ReplayBuffer) or not buffer.initialized or len(buffer.transform):
        return None
    storage = buffer.storage
    if not isinstance(storage, TensorStorage) or storage.ndim != 1:
        return None
    if storage.device.type != "cpu" or not len(storage):
        return None
    keys = storage.leaf_keys()
    if not keys or () in keys:  # a plain tensor, not a TensorDict
        return None
    return Sources(keys, [storage.get_leaf(key) for key in keys])


#: Layouts already computed: (slot memory address, entries) -> what codec.allocate returned.
Layouts = dict[tuple[int, tuple[Any, ...]], tuple[list[torch.Tensor], list[Any], int]]


def fill_slot(
    buffer: Any,
    sources: Sources,
    draw: Draw,
    memory: torch.Tensor,
    layouts: Layouts,
    *,
    with_info: bool,
) -> Filled | None:
    """Gather ``draw``'s rows of ``sources`` into ``memory``; None if they do not fit.

    Args:
        buffer: the hosted buffer (its lock is held while rows are read).
        sources: what :func:`direct_sources` returned for it.
        draw: a non-empty draw of 1-D indices.
        memory: the slot.
        layouts: a cache of slot layouts (batches of one shape reuse the slot's views).
        with_info: attach the draw's per-row info entries to the batch.
    """
    index = draw.index
    if index.ndim != 1:
        return None
    rows = index.shape[0]
    info = {k: v for k, v in draw.info.items() if isinstance(v, torch.Tensor)}
    entries = [(s.dtype, (rows, *s.shape[1:])) for s in sources.leaves]
    entries += [(v.dtype, tuple(v.shape)) for v in (index, *info.values())]
    key = (memory.data_ptr(), tuple(entries))
    laid_out = layouts.get(key)
    if laid_out is None:
        laid_out = allocate(memory, entries)
        if laid_out is None:
            return None
        layouts[key] = laid_out
    views, nodes, used = laid_out
    n = len(sources.leaves)
    with buffer.lock:  # a write must not tear the rows being gathered
        for source, out in zip(sources.leaves, views[:n], strict=True):
            torch.index_select(source, 0, index, out=out)
    for value, out in zip((index, *info.values()), views[n:], strict=True):
        out.copy_(value)
    info_nodes = dict(zip(info, nodes[n + 1 :], strict=True))
    data = dict(zip(sources.keys, nodes[:n], strict=True))
    if with_info:
        data.update({k: node for k, node in info_nodes.items() if info[k].shape[:1] == (rows,)})
    return Filled(dict_node((rows,), data), nodes[n], info_nodes, used)

"""Sharing a buffer between processes (torchrl's ``shared=True``, ``share()``, ``sync=``).

A shared buffer keeps, in memory every process maps, its rows (the storage's
``share_memory_()``), its length, its writer's cursor, write count and slot
generations, and one lock from the spawn context that forked and spawned
children take around every write and draw. Each process keeps its own
sampler: the one that samples (the learner) catches up with the writes other
processes made, from the shared write count (:class:`_WriteFollower`), so its
priorities and trajectory index cover every item whoever wrote it.
"""

from __future__ import annotations

from typing import Any

import torch


def check_shared_prefetch(shared: bool, prefetch: int | None) -> None:
    """ValueError for ``shared=True`` with ``prefetch`` (a thread's batches cannot be shared)."""
    if shared and prefetch:
        raise ValueError(
            f"Cannot share prefetched replay buffers: got shared=True with prefetch={prefetch}; "
            "pass prefetch=0 or shared=False."
        )


def share_transform(transform: Any) -> None:
    """Move a transform's write state to shared memory (each of a Compose's).

    Raises:
        RuntimeError: for a transform that keeps write state
            (``requires_shared_write_state``) but has no ``share_memory_()``.
    """
    parts = getattr(transform, "transforms", None)
    if parts is not None and not callable(getattr(transform, "share_memory_", None)):
        for part in parts:
            share_transform(part)
        return
    share_memory = getattr(transform, "share_memory_", None)
    if callable(share_memory):
        share_memory()
        return
    if getattr(transform, "requires_shared_write_state", False):
        raise RuntimeError(
            f"{type(transform).__name__} keeps replay-buffer write state but does not "
            "implement share_memory_(): a shared buffer cannot use it. Use a writer in one "
            "process, or a transform whose write state can be shared."
        )


class _WriteFollower:
    """How many of the writer's writes this process's sampler was told about.

    A writer shared with other buffers or processes counts their writes too;
    :meth:`missed` gives the slots written since this process last looked
    (ring writers only: their slots follow from the count), so the sampler
    and the sample unit hear of them before the next draw.

    Examples:
        >>> follower = _WriteFollower(0)
        >>> follower.missed(5, capacity=4, ring=True).tolist()
        [0, 1, 2, 3]
        >>> follower.missed(7, capacity=4, ring=True).tolist()
        [1, 2]
        >>> follower.missed(7, capacity=4, ring=True) is None
        True
    """

    def __init__(self, seen: int) -> None:
        self.seen = seen

    def missed(self, count: int, capacity: int, ring: bool) -> torch.Tensor | None:
        """The slots written since the last look (None: none, or not knowable), and look."""
        seen, self.seen = self.seen, count
        if count <= seen or not ring:  # emptied elsewhere, or slots not from the count
            return None
        if count - seen >= capacity:
            return torch.arange(capacity)
        return torch.arange(seen, count).remainder_(capacity)

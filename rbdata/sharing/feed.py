"""The feed of committed writes that each process's sampler follows.

A shared buffer keeps, in memory every process maps, its rows, its length,
its writer's cursor, write count and slot generations. Each process keeps its
own sampler and sample unit: before a draw they catch up with the writes
other processes (and this process's reserved writes) made, from the shared
write count (:class:`WriteFeed`), so priorities and trajectory indexes cover
every item whoever wrote it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["WriteFeed"]


class WriteFeed:
    """How many of the writer's writes this process's sampler was told about.

    A writer shared with other buffers or processes counts their writes too;
    :meth:`missed` gives the slots written since this process last looked
    (ring writers only: their slots follow from the count), so the sampler
    and the sample unit hear of them before the next draw (:meth:`catch_up`).

    Args:
        seen: the write count already told.

    Examples:
        >>> feed = WriteFeed(0)
        >>> feed.missed(5, capacity=4, ring=True).tolist()
        [0, 1, 2, 3]
        >>> feed.missed(7, capacity=4, ring=True).tolist()
        [1, 2]
        >>> feed.missed(7, capacity=4, ring=True) is None
        True
        >>> told = []
        >>> feed.catch_up(9, 4, True, lambda slots: told.append(slots.tolist()))
        >>> told, feed.seen
        ([[3, 0]], 9)
    """

    def __init__(self, seen: int) -> None:
        self.seen = seen

    def copy(self) -> WriteFeed:
        """A feed that has seen what this one has (for a reader's copy of the buffer)."""
        return WriteFeed(self.seen)

    def skip_to(self, count: int) -> None:
        """Every write up to ``count`` was told already (this process wrote them, or a reset)."""
        self.seen = count

    def catch_up(
        self, count: int, capacity: int, ring: bool, tell: Callable[[torch.Tensor], None]
    ) -> None:
        """``tell(slots)`` the slots written since the last look (nothing when none or unknowable).

        Args:
            count: the writer's write count now.
            capacity: the ring's slots.
            ring: whether slots follow from the count (a ring writer, nothing consumed).
            tell: hands the slots to the sampler and the sample unit.
        """
        if count == self.seen:
            return
        missed = self.missed(count, capacity, ring)
        if missed is not None:
            tell(missed)

    def missed(self, count: int, capacity: int, ring: bool) -> torch.Tensor | None:
        """The slots written since the last look (None: none, or not knowable), and look."""
        seen, self.seen = self.seen, count
        if count <= seen or not ring:  # emptied elsewhere, or slots not from the count
            return None
        if count - seen >= capacity:
            return torch.arange(capacity)
        return torch.arange(seen, count).remainder_(capacity)

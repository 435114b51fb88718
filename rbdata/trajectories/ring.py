"""Where the written items of a ring storage lie: write positions, time order, the seam.

A storage is a ring of ``capacity`` time slots written in order; each write
gets a *virtual position* ``v`` (a running count of writes) with
``slot = v % capacity``. With ``ndim > 1`` each time slot holds ``cells``
records (one per lane, e.g. per environment), stored flat as
``slot * cells + lane``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rbdata.storages import Storage, shape_of

__all__ = ["RingLayout", "chronological_order", "next_v_end"]


def next_v_end(v_end: int, newest: int | None, n: int, capacity: int) -> int:
    """The write position after the slot ``newest`` was written last (None: unknown).

    The smallest position at or after ``v_end`` whose slot follows ``newest``
    and that leaves room for the ``n`` live items of a ring of ``capacity``.
    """
    if n < capacity:
        newest = n - 1
    elif newest is None:
        newest = (v_end - 1) % capacity if v_end > 0 else capacity - 1
    out = v_end + (newest + 1 - v_end) % capacity
    if out < n:
        out += capacity * -(-(n - out) // capacity)
    return out


def chronological_order(storage: Storage, cursor: int) -> tuple[torch.Tensor, int]:
    """Slots of a ring storage, oldest first (``cursor``: the next item written).

    For a storage with ``ndim > 1`` (items of several cells, e.g. one per
    environment) the cells are grouped by coordinate, each group in time order.

    Returns:
        ``(order, group)``: the slots, and the number of slots per coordinate.
    """
    n = len(storage)
    if storage.ndim == 1:
        capacity, cells = storage.max_size, 1
    else:
        capacity, cells = shape_of(storage)[0], math.prod(shape_of(storage)[1:])
    items = n // cells
    oldest = cursor % capacity if items >= capacity else 0
    order = torch.arange(oldest, oldest + items) % capacity
    if cells > 1:
        order = (torch.arange(cells).unsqueeze(1) + order * cells).reshape(-1)
    return order, items


@dataclass(frozen=True)
class RingLayout:
    """Where the written time slots of a ring storage lie.

    Attributes:
        capacity: time slots of the storage.
        cells: records per time slot (1 for ``ndim == 1``).
        items: time slots written (``capacity`` once the ring is full).
        newest: the time slot written last.
    """

    capacity: int
    cells: int
    items: int
    newest: int

    @classmethod
    def of(cls, storage: Storage, newest: int | None) -> RingLayout:
        """The layout of ``storage``, whose newest slot is ``newest`` once the ring is full.

        Args:
            storage: a tensor storage holding at least one record.
            newest: the slot written last, as reported by the writes; None when
                unknown (the storage is then taken as written in slot order,
                from slot 0).
        """
        shape = shape_of(storage)
        capacity, cells = shape[0], math.prod(shape[1:])
        items = len(storage) // cells
        if items < capacity or newest is None:
            newest = items - 1
        return cls(capacity, cells, items, newest % capacity)

    def seam_span(self, time: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(lo, hi)``: the oldest and newest written slot, as positions around ``time``.

        ``lo <= time <= hi``; ``% capacity`` turns a position back into a slot.
        """
        oldest = (self.newest + 1) % self.capacity if self.items == self.capacity else 0
        back = torch.remainder(time - oldest, self.capacity)
        ahead = torch.remainder(self.newest - time, self.capacity)
        return time - back, ahead.add_(time)

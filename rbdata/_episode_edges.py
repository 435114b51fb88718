"""How far each anchor of a ring storage is from the first and last record of its episode.

:class:`~rbdata.Sequence` expands an anchor into a window of records that
must not leave the anchor's episode (or, with ``include_reset``, the written
data). Two distances per anchor decide it: ``back``, the records between the
episode's first record and the anchor, and ``ahead``, the records between the
anchor and the episode's last one. The write seam of a full ring (the newest
record is followed by the oldest) always ends an episode, and so does the
newest record of a storage that is not full.

A storage has ``capacity`` time slots; with ``ndim > 1`` each time slot holds
``cells`` records (one per lane, e.g. per environment), stored flat as
``slot * cells + lane``. Episodes run along time, lane by lane.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from rbdata._component.checks import NestedKey
from rbdata._trajectories import read_leaf

__all__ = ["RingLayout", "scan_edges"]


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
    def of(cls, storage: Any, newest: int | None) -> RingLayout:
        """The layout of ``storage``, whose newest slot is ``newest`` once the ring is full.

        Args:
            storage: a tensor storage holding at least one record.
            newest: the slot written last, as reported by the writes; None when
                unknown (the storage is then taken as written in slot order,
                from slot 0).
        """
        shape = tuple(storage.shape)
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


def scan_edges(
    storage: Any,
    done_key: NestedKey,
    layout: RingLayout,
    cell: tuple[torch.Tensor, torch.Tensor],
    seam: tuple[torch.Tensor, torch.Tensor],
    reach: tuple[int, int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lo, hi)``: each anchor's episode's first and last record, from the flags around it.

    Reads ``reach[0] + reach[1]`` flags per anchor (never the whole storage).

    Args:
        storage: the tensor storage holding the ``done_key`` entry.
        done_key: the end-of-episode flag entry.
        layout: the storage's :class:`RingLayout`.
        cell: ``(time, lane)`` of each anchor.
        seam: ``(lo, hi)`` of each anchor's written data (:meth:`RingLayout.seam_span`).
        reach: how far back and ahead of the anchor the edges matter; farther
            ones are returned at that distance.

    Returns:
        Positions (as in :meth:`RingLayout.seam_span`) of the record just after
        an earlier done flag, or the oldest written one, and of the first done
        flag at or after the anchor, or the newest written record; each at most
        ``reach`` away from the anchor.
    """
    time, lane = cell
    seam_lo, seam_hi = seam
    reach_back, reach_ahead = reach
    if not reach_back + reach_ahead:  # a window of one record: the anchor itself
        return time, time
    steps = torch.arange(-reach_back, reach_ahead, device=time.device)
    flags = _done_flags(storage, done_key, layout, time, lane, steps)
    lo, hi = time, time + reach_ahead
    if reach_back:  # just after the nearest earlier flag
        start = torch.where(flags[:, :reach_back], steps[:reach_back] + 1, -reach_back)
        lo = start.amax(1).add_(time)
    if reach_ahead:  # the first flag at or after the anchor
        stop = torch.where(flags[:, reach_back:], steps[reach_back:], reach_ahead)
        hi = stop.amin(1).add_(time)
    return torch.maximum(lo, seam_lo), torch.minimum(hi, seam_hi)


def _done_flags(
    storage: Any,
    done_key: NestedKey,
    layout: RingLayout,
    time: torch.Tensor,
    lane: torch.Tensor,
    steps: torch.Tensor,
) -> torch.Tensor:
    """``[anchors, steps]`` done flags of the records ``steps`` away from each anchor.

    Positions outside the written slots are read too (the caller bounds the
    result by the seam).
    """
    slots = (time.unsqueeze(1) + steps).remainder_(layout.capacity)
    if layout.cells > 1:
        slots = slots.mul_(layout.cells).add_(lane.unsqueeze(1))
    flags = read_leaf(storage, done_key, slots.view(-1)).reshape(slots.numel(), -1)
    flags = flags.view(-1) if flags.shape[1] == 1 else flags.any(1)
    return flags.to(time.device, torch.bool).view(slots.shape)

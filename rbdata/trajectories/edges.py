"""How far each anchor of a ring storage is from the first and last record of its episode.

:class:`~rbdata.Sequence` expands an anchor into a window of records that
must not leave the anchor's episode (or, with ``include_reset``, the written
data). Two distances per anchor decide it: ``back``, the records between the
episode's first record and the anchor, and ``ahead``, the records between the
anchor and the episode's last one. The write seam of a full ring (the newest
record is followed by the oldest) always ends an episode, and so does the
newest record of a storage that is not full. Episodes run along time, lane by
lane (see :mod:`rbdata.trajectories.ring`); :func:`scan_edges` splits the
done flags around each anchor with :func:`~rbdata.trajectories.runs.split_runs`.
"""

from __future__ import annotations

import numpy as np
import torch

from rbdata._component.checks import NestedKey
from rbdata.storages import Storage
from rbdata.trajectories.reading import read_leaf
from rbdata.trajectories.ring import RingLayout
from rbdata.trajectories.runs import split_runs

__all__ = ["scan_edges"]


def scan_edges(
    storage: Storage,
    done_key: NestedKey,
    layout: RingLayout,
    cell: tuple[torch.Tensor, torch.Tensor],
    seam: tuple[torch.Tensor, torch.Tensor],
    reach: tuple[int, int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lo, hi)``: each anchor's episode's first and last record, from the flags around it.

    Reads ``reach[0] + reach[1] + 1`` flags per anchor (never the whole storage):
    the window from ``reach[0]`` records before the anchor to ``reach[1]`` after
    it, one lane per anchor, split into episodes.

    Args:
        storage: the tensor storage holding the ``done_key`` entry.
        done_key: the end-of-episode flag entry.
        layout: the storage's :class:`~rbdata.trajectories.ring.RingLayout`.
        cell: ``(time, lane)`` of each anchor.
        seam: ``(lo, hi)`` of each anchor's written data
            (:meth:`~rbdata.trajectories.ring.RingLayout.seam_span`).
        reach: how far back and ahead of the anchor the edges matter; farther
            ones are returned at that distance.

    Returns:
        Positions (as in :meth:`~rbdata.trajectories.ring.RingLayout.seam_span`)
        of the record just after an earlier done flag, or the oldest written
        one, and of the first done flag at or after the anchor, or the newest
        written record; each at most ``reach`` away from the anchor.
    """
    time, lane = cell
    seam_lo, seam_hi = seam
    reach_back, reach_ahead = reach
    if not reach_back + reach_ahead:  # a window of one record: the anchor itself
        return time, time
    width = reach_back + reach_ahead + 1
    steps = torch.arange(-reach_back, reach_ahead + 1, device=time.device)
    flags = _done_flags(storage, done_key, layout, time, lane, steps)
    starts, lengths = split_runs(flags, "ends", lane=width)
    anchors = np.arange(time.numel(), dtype=np.int64) * width
    k = np.searchsorted(starts, anchors + reach_back, side="right") - 1
    back = starts[k] - anchors  # in the window: the episode's first record ...
    ahead = back + lengths[k] - 1  # ... and its last one
    lo = torch.from_numpy(back - reach_back).to(time.device).add_(time)
    hi = torch.from_numpy(ahead - reach_back).to(time.device).add_(time)
    return torch.maximum(lo, seam_lo), torch.minimum(hi, seam_hi)


def _done_flags(
    storage: Storage,
    done_key: NestedKey,
    layout: RingLayout,
    time: torch.Tensor,
    lane: torch.Tensor,
    steps: torch.Tensor,
) -> np.ndarray:
    """The done flags of the records ``steps`` away from each anchor, anchor after anchor.

    Positions outside the written slots are read too (the caller bounds the
    result by the seam).
    """
    slots = (time.unsqueeze(1) + steps).remainder_(layout.capacity)
    if layout.cells > 1:
        slots = slots.mul_(layout.cells).add_(lane.unsqueeze(1))
    flags = read_leaf(storage, done_key, slots.view(-1)).reshape(slots.numel(), -1)
    flags = flags.view(-1) if flags.shape[1] == 1 else flags.any(1)
    out: np.ndarray = flags.to("cpu", torch.bool).numpy()
    return out
